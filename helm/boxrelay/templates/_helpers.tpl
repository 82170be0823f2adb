{{/* Chart name, truncated to 63 characters. */}}
{{- define "boxrelay.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name, truncated to 63 characters (DNS label limit). */}}
{{- define "boxrelay.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "boxrelay.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "boxrelay.selectorLabels" -}}
app.kubernetes.io/name: {{ include "boxrelay.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "boxrelay.labels" -}}
helm.sh/chart: {{ include "boxrelay.chart" . }}
{{ include "boxrelay.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "boxrelay.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "boxrelay.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "boxrelay.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion | toString) }}
{{- end }}

{{/* Name of the Secret the chart creates for inline secret values. */}}
{{- define "boxrelay.secretName" -}}
{{- include "boxrelay.fullname" . }}
{{- end }}

{{/*
The Secret a pod reads the inline values from: the release's, or for the migration Job (a context
with `ownSecret`) its own copy, which exists before the release's on a first install.
*/}}
{{- define "boxrelay.ownSecret" -}}
{{- if hasKey . "ownSecret" }}{{ .ownSecret }}{{ else }}{{ include "boxrelay.secretName" . }}{{ end }}
{{- end }}

{{/* The inline secret values as YAML (`{}` when none): the release's Secret and the migration Job's copy hold them. */}}
{{- define "boxrelay.secretData" -}}
{{- $s := .Values.secrets }}
{{- $data := dict }}
{{- if and $s.signing.secrets (not $s.signing.existingSecret) }}
{{- $_ := set $data $s.signing.key (printf "%s\n" (join "\n" $s.signing.secrets)) }}
{{- end }}
{{- if and $s.hooks.hooks (not $s.hooks.existingSecret) }}
{{- $_ := set $data $s.hooks.key (toYaml $s.hooks.hooks) }}
{{- end }}
{{- if and $s.accounts.accounts (not $s.accounts.existingSecret) }}
{{- $_ := set $data $s.accounts.key (toYaml $s.accounts.accounts) }}
{{- end }}
{{- if and $s.adminToken.value (not $s.adminToken.existingSecret) }}
{{- $_ := set $data $s.adminToken.key $s.adminToken.value }}
{{- end }}
{{- if and $s.postgres.url (not $s.postgres.existingSecret) }}
{{- $_ := set $data $s.postgres.key $s.postgres.url }}
{{- end }}
{{- if and $s.upstreamApiKey.value (not $s.upstreamApiKey.existingSecret) }}
{{- $_ := set $data $s.upstreamApiKey.key $s.upstreamApiKey.value }}
{{- end }}
{{- if and $s.secretsEncryptionKey.value (not $s.secretsEncryptionKey.existingSecret) }}
{{- $_ := set $data $s.secretsEncryptionKey.key $s.secretsEncryptionKey.value }}
{{- end }}
{{- range $name := list "amqpUrl" "redisUrl" "mqttUrl" "kafkaSaslPassword" }}
{{- $url := get $s $name }}
{{- if and $url.value (not $url.existingSecret) }}
{{- $_ := set $data $url.key $url.value }}
{{- end }}
{{- end }}
{{- if not $s.nats.existingSecret }}
{{- if eq $s.nats.auth "creds" }}
{{- $_ := set $data $s.nats.credsKey $s.nats.creds }}
{{- else if eq $s.nats.auth "token" }}
{{- $_ := set $data $s.nats.tokenKey $s.nats.token }}
{{- else if eq $s.nats.auth "userPassword" }}
{{- $_ := set $data $s.nats.userKey $s.nats.user }}
{{- $_ := set $data $s.nats.passwordKey $s.nats.password }}
{{- end }}
{{- end }}
{{- toYaml $data }}
{{- end }}

{{/* "true" when the PostgreSQL migration Job runs (migrate-job.yaml). */}}
{{- define "boxrelay.migrationJob" -}}
{{- if and (include "boxrelay.usePostgres" .) .Values.migrationJob.enabled }}true{{ end }}
{{- end }}

{{/* Annotations of the migration Job's hook objects, run before any new replica starts; `weight` orders them. */}}
{{- define "boxrelay.migrationHook" -}}
helm.sh/hook: pre-install,pre-upgrade
helm.sh/hook-weight: {{ .weight | quote }}
# Replaced at the next release; gone once the Job succeeds (a failed one stays for `kubectl logs`).
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end }}

{{/* "true" when PostgreSQL is configured (then: Deployment), "" for the SQLite default. */}}
{{- define "boxrelay.usePostgres" -}}
{{- if or .Values.secrets.postgres.url .Values.secrets.postgres.existingSecret }}true{{ end }}
{{- end }}

{{/* "true" when the signing secrets file is configured. */}}
{{- define "boxrelay.hasSigningSecrets" -}}
{{- if or .Values.secrets.signing.secrets .Values.secrets.signing.existingSecret }}true{{ end }}
{{- end }}

{{/* "true" when the accounts file is configured. */}}
{{- define "boxrelay.hasAccounts" -}}
{{- if or .Values.secrets.accounts.accounts .Values.secrets.accounts.existingSecret }}true{{ end }}
{{- end }}

{{/* "true" when the hooks file is configured. */}}
{{- define "boxrelay.hasHooks" -}}
{{- if or .Values.secrets.hooks.hooks .Values.secrets.hooks.existingSecret }}true{{ end }}
{{- end }}

{{/*
Stops the render with one clear message per misconfiguration that Kubernetes would not catch.
*/}}
{{- define "boxrelay.validate" -}}
{{- if and (include "boxrelay.usePostgres" .) .Values.backup.enabled }}
{{- fail "backup.enabled backs up the SQLite volume; with PostgreSQL back the database up with pg_dump (docs/operations.md) and set backup.enabled=false." }}
{{- end }}
{{- if and (not (include "boxrelay.usePostgres" .)) (gt (int .Values.replicaCount) 1) }}
{{- fail "replicaCount > 1 needs PostgreSQL: the SQLite default lives on one ReadWriteOnce volume and serves exactly one replica. Set secrets.postgres.url (or secrets.postgres.existingSecret), or replicaCount: 1." }}
{{- end }}
{{- with .Values.secrets.postgres.url }}
{{- if not (regexMatch "^postgres(ql)?://" .) }}
{{- fail "secrets.postgres.url must be a postgres:// or postgresql:// URL" }}
{{- end }}
{{- end }}
{{- if not (has .Values.config.natsMode (list "jetstream" "core" "")) }}
{{- fail "config.natsMode must be jetstream or core (or empty for the relay's default)" }}
{{- end }}
{{- if and .Values.networkPolicy.enabled .Values.serviceMonitor.enabled (not .Values.networkPolicy.internalFrom) }}
{{- fail "serviceMonitor.enabled with networkPolicy.enabled: the NetworkPolicy would block Prometheus from scraping /metrics on the internal port. Allow Prometheus in networkPolicy.internalFrom, e.g. --set-json 'networkPolicy.internalFrom=[{\"namespaceSelector\":{\"matchLabels\":{\"kubernetes.io/metadata.name\":\"monitoring\"}},\"podSelector\":{\"matchLabels\":{\"app.kubernetes.io/name\":\"prometheus\"}}}]' (your Prometheus namespace and pod labels)." }}
{{- end }}
{{- $nats := .Values.secrets.nats }}
{{- if not (has $nats.auth (list "none" "creds" "token" "userPassword")) }}
{{- fail "secrets.nats.auth must be one of none, creds, token, userPassword" }}
{{- end }}
{{- if not $nats.existingSecret }}
{{- if and (eq $nats.auth "creds") (not $nats.creds) }}
{{- fail "secrets.nats.auth is creds: set secrets.nats.creds or secrets.nats.existingSecret" }}
{{- end }}
{{- if and (eq $nats.auth "token") (not $nats.token) }}
{{- fail "secrets.nats.auth is token: set secrets.nats.token or secrets.nats.existingSecret" }}
{{- end }}
{{- if and (eq $nats.auth "userPassword") (not (and $nats.user $nats.password)) }}
{{- fail "secrets.nats.auth is userPassword: set secrets.nats.user and secrets.nats.password, or secrets.nats.existingSecret" }}
{{- end }}
{{- end }}
{{- end }}

{{/* A duration setting ("0", "500ms", "5s", "1m", "1h", "1d") in whole seconds, rounded up. */}}
{{- define "boxrelay.durationSeconds" -}}
{{- $text := toString . }}
{{- $ms := mul (regexFind "^[0-9]+" $text | default "0" | int) (get (dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000 "d" 86400000) (regexFind "[a-z]+$" $text) | default 0) }}
{{- div (add $ms 999) 1000 }}
{{- end }}

{{/*
One plain environment variable, or nothing when the value is empty.
Numbers are rendered as integers (YAML numbers arrive as float64 and would print 1e+06).
*/}}
{{- define "boxrelay.envVar" -}}
{{- $v := .value }}
{{- if kindIs "float64" $v }}{{ $v = int64 $v }}{{ end }}
{{- if and (not (kindIs "invalid" $v)) (ne (toString $v) "") }}
- name: {{ .name }}
  value: {{ toString $v | quote }}
{{- end }}
{{- end }}

{{/* One environment variable read from a Secret. */}}
{{- define "boxrelay.envFromSecret" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ .secret }}
      key: {{ .key }}
{{- end }}

{{/* The relay's environment: config.* (contract section 1 names) and the secret settings. */}}
{{- define "boxrelay.env" -}}
{{- /* The relay's own shutdown budget fits the pod's grace period: what preStop sleeps, the relay's
     shutdown delay, and ~10 s for the outbox hand-back and the NATS drain that follow the HTTP close,
     are taken off. A budget set by hand that does not fit is refused rather than cut by SIGKILL. */}}
{{- $grace := int .Values.terminationGracePeriodSeconds }}
{{- $before := add (int .Values.preStopSleepSeconds) (include "boxrelay.durationSeconds" .Values.config.shutdownDelay | int) }}
{{- $timeoutMs := .Values.config.shutdownTimeoutMs | default (mul (sub (sub $grace $before) 10) 1000) | int }}
{{- if or (lt $timeoutMs 1000) (gt (add (mul (add $before 10) 1000) $timeoutMs) (mul $grace 1000)) }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must cover preStopSleepSeconds + config.shutdownDelay (%d s together), config.shutdownTimeoutMs (at least 1000) and 10 s for the fan-out hand-back" $grace $before) }}
{{- end }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_SHUTDOWN_TIMEOUT_MS" "value" $timeoutMs) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_SHUTDOWN_DELAY" "value" .Values.config.shutdownDelay) }}
{{- include "boxrelay.envVar" (dict "name" "PORT" "value" .Values.config.port) }}
{{- include "boxrelay.envVar" (dict "name" "HOST" "value" .Values.config.host) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_INTERNAL_PORT" "value" .Values.config.internalPort) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_INTERNAL_HOST" "value" .Values.config.internalHost) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_TOLERANCE_SECONDS" "value" .Values.config.toleranceSeconds) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_MAX_BODY_BYTES" "value" .Values.config.maxBodyBytes) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_RETENTION_DAYS" "value" .Values.config.retentionDays) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_NATS_URL" "value" .Values.config.natsUrl) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_NATS_SUBJECT_PREFIX" "value" .Values.config.natsSubjectPrefix) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_NATS_MODE" "value" .Values.config.natsMode) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_NATS_STREAM" "value" .Values.config.natsStream) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_NATS_DUPLICATE_WINDOW" "value" .Values.config.natsDuplicateWindow) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_NATS_MAX_AGE" "value" .Values.config.natsMaxAge) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_NATS_TLS_CA_FILE" "value" .Values.config.natsTlsCaFile) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_SOURCE" "value" .Values.config.source) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_UPSTREAM_BASE_URL" "value" .Values.config.upstreamBaseUrl) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_RECONCILE_INTERVAL" "value" .Values.config.reconcileInterval) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_RECONCILE_MAX_RPS" "value" .Values.config.reconcileMaxRps) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_RECONCILE_MAX_PAGES" "value" .Values.config.reconcileMaxPages) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_RECONCILE_MAX_DURATION" "value" .Values.config.reconcileMaxDuration) }}
{{- include "boxrelay.envVar" (dict "name" "LOG_LEVEL" "value" .Values.config.logLevel) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_NATS_ORDERING" "value" .Values.config.natsOrdering) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_AMQP_EXCHANGE" "value" .Values.config.amqpExchange) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_AMQP_QUEUE" "value" .Values.config.amqpQueue) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_AMQP_ORDERING" "value" .Values.config.amqpOrdering) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_REDIS_STREAM" "value" .Values.config.redisStream) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_REDIS_MAXLEN" "value" .Values.config.redisMaxlen) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_REDIS_DUPLICATE_WINDOW" "value" .Values.config.redisDuplicateWindow) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_REDIS_ORDERING" "value" .Values.config.redisOrdering) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_MQTT_TOPIC_PREFIX" "value" .Values.config.mqttTopicPrefix) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_MQTT_ORDERING" "value" .Values.config.mqttOrdering) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_KAFKA_BROKERS" "value" .Values.config.kafkaBrokers) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_KAFKA_TOPIC" "value" .Values.config.kafkaTopic) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_KAFKA_CLIENT_ID" "value" .Values.config.kafkaClientId) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_KAFKA_SASL_MECHANISM" "value" .Values.config.kafkaSaslMechanism) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_KAFKA_SASL_USERNAME" "value" .Values.config.kafkaSaslUsername) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_KAFKA_TLS" "value" .Values.config.kafkaTls) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_KAFKA_TLS_CA_FILE" "value" .Values.config.kafkaTlsCaFile) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_KAFKA_ORDERING" "value" .Values.config.kafkaOrdering) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_AWS_REGION" "value" .Values.config.awsRegion) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_AWS_ENDPOINT" "value" .Values.config.awsEndpoint) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_SQS_QUEUE_URL" "value" .Values.config.sqsQueueUrl) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_SQS_ORDERING" "value" .Values.config.sqsOrdering) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_SNS_TOPIC_ARN" "value" .Values.config.snsTopicArn) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_SNS_ORDERING" "value" .Values.config.snsOrdering) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_S3_ARCHIVE" "value" .Values.config.s3Archive) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_S3_ARCHIVE_MAX_EVENTS" "value" .Values.config.s3ArchiveMaxEvents) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_S3_ARCHIVE_MAX_AGE" "value" .Values.config.s3ArchiveMaxAge) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_OUTBOX_POLL_MS" "value" .Values.config.outboxPollMs) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_OUTBOX_LEASE_MS" "value" .Values.config.outboxLeaseMs) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_UNSERVED_SINK_GRACE" "value" .Values.config.unservedSinkGrace) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_FANOUT_THREAD" "value" .Values.config.fanoutThread) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_FANOUT_NICENESS" "value" .Values.config.fanoutNiceness) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_FANOUT_HEAP_MB" "value" .Values.config.fanoutHeapMb) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_ATTEMPTS" "value" .Values.config.attempts) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_SECRETS_RELOAD_MS" "value" .Values.config.secretsReloadMs) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_SQLITE_SYNCHRONOUS" "value" .Values.config.sqliteSynchronous) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_BUSY_TIMEOUT_MS" "value" .Values.config.busyTimeoutMs) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_DATABASE_TIMEOUT_MS" "value" .Values.config.databaseTimeoutMs) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_DATABASE_POOL_SIZE" "value" .Values.config.databasePoolSize) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_DATABASE_MAX_WAITING" "value" .Values.config.databaseMaxWaiting) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_DATABASE_SECRETS_REFRESH_MS" "value" .Values.config.databaseSecretsRefreshMs) }}
{{- with .Values.tracing }}
{{- if .endpoint }}
{{- include "boxrelay.envVar" (dict "name" "OTEL_EXPORTER_OTLP_ENDPOINT" "value" .endpoint) }}
{{- include "boxrelay.envVar" (dict "name" "OTEL_EXPORTER_OTLP_PROTOCOL" "value" .protocol) }}
{{- include "boxrelay.envVar" (dict "name" "OTEL_SERVICE_NAME" "value" .serviceName) }}
{{- include "boxrelay.envVar" (dict "name" "OTEL_TRACES_SAMPLER" "value" .sampler) }}
{{- include "boxrelay.envVar" (dict "name" "OTEL_TRACES_SAMPLER_ARG" "value" .samplerArg) }}
{{- end }}
{{- end }}
{{- with .Values.proxy }}
{{- include "boxrelay.envVar" (dict "name" "HTTPS_PROXY" "value" .httpsProxy) }}
{{- include "boxrelay.envVar" (dict "name" "HTTP_PROXY" "value" .httpProxy) }}
{{- include "boxrelay.envVar" (dict "name" "NO_PROXY" "value" .noProxy) }}
{{- end }}
{{- $s := .Values.secrets }}
{{- $own := include "boxrelay.ownSecret" . }}
{{- if include "boxrelay.usePostgres" . }}
{{ include "boxrelay.envFromSecret" (dict "name" "BOXRELAY_DATABASE" "secret" ($s.postgres.existingSecret | default $own) "key" $s.postgres.key) }}
{{- else }}
- name: BOXRELAY_DATABASE
  value: /data/boxrelay.db
{{- end }}
{{- with .Values.backup }}
{{- if .enabled }}
- name: BOXRELAY_BACKUP_DIR
  value: /backups
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_BACKUP_INTERVAL" "value" .interval) }}
{{- include "boxrelay.envVar" (dict "name" "BOXRELAY_BACKUP_KEEP" "value" .keep) }}
{{- end }}
{{- end }}
{{- if include "boxrelay.hasSigningSecrets" . }}
- name: BOXRELAY_SECRETS_FILE
  value: /etc/boxrelay/signing/secrets
{{- end }}
{{- if include "boxrelay.hasHooks" . }}
- name: BOXRELAY_HOOKS_FILE
  value: /etc/boxrelay/hooks/hooks.yaml
{{- end }}
{{- if include "boxrelay.hasAccounts" . }}
- name: BOXRELAY_ACCOUNTS_FILE
  value: /etc/boxrelay/accounts/accounts.yaml
{{- end }}
{{- if or $s.adminToken.value $s.adminToken.existingSecret }}
{{ include "boxrelay.envFromSecret" (dict "name" "BOXRELAY_ADMIN_TOKEN" "secret" ($s.adminToken.existingSecret | default $own) "key" $s.adminToken.key) }}
{{- end }}
{{- if or $s.upstreamApiKey.value $s.upstreamApiKey.existingSecret }}
{{ include "boxrelay.envFromSecret" (dict "name" "BOXRELAY_UPSTREAM_API_KEY" "secret" ($s.upstreamApiKey.existingSecret | default $own) "key" $s.upstreamApiKey.key) }}
{{- end }}
{{- if or $s.secretsEncryptionKey.value $s.secretsEncryptionKey.existingSecret }}
{{ include "boxrelay.envFromSecret" (dict "name" "BOXRELAY_SECRETS_ENCRYPTION_KEY" "secret" ($s.secretsEncryptionKey.existingSecret | default $own) "key" $s.secretsEncryptionKey.key) }}
{{- end }}
{{- range $name, $env := dict "amqpUrl" "BOXRELAY_AMQP_URL" "redisUrl" "BOXRELAY_REDIS_URL" "mqttUrl" "BOXRELAY_MQTT_URL" "kafkaSaslPassword" "BOXRELAY_KAFKA_SASL_PASSWORD" }}
{{- $url := get $s $name }}
{{- if or $url.value $url.existingSecret }}
{{ include "boxrelay.envFromSecret" (dict "name" $env "secret" ($url.existingSecret | default $own) "key" $url.key) }}
{{- end }}
{{- end }}
{{- $natsSecret := $s.nats.existingSecret | default $own }}
{{- if eq $s.nats.auth "creds" }}
- name: BOXRELAY_NATS_CREDS_FILE
  value: /etc/boxrelay/nats/nats.creds
{{- else if eq $s.nats.auth "token" }}
{{ include "boxrelay.envFromSecret" (dict "name" "BOXRELAY_NATS_TOKEN" "secret" $natsSecret "key" $s.nats.tokenKey) }}
{{- else if eq $s.nats.auth "userPassword" }}
{{ include "boxrelay.envFromSecret" (dict "name" "BOXRELAY_NATS_USER" "secret" $natsSecret "key" $s.nats.userKey) }}
{{ include "boxrelay.envFromSecret" (dict "name" "BOXRELAY_NATS_PASSWORD" "secret" $natsSecret "key" $s.nats.passwordKey) }}
{{- end }}
{{- end }}

{{/*
Checksum of everything that only takes effect on a restart (environment, hooks file).
The signing secrets are left out on purpose: the relay re-reads that file, no restart needed.
*/}}
{{- define "boxrelay.restartChecksum" -}}
{{- $s := .Values.secrets }}
{{- dict "config" .Values.config "hooks" $s.hooks "accounts" $s.accounts "adminToken" $s.adminToken "postgres" $s.postgres "nats" $s.nats "amqpUrl" $s.amqpUrl "redisUrl" $s.redisUrl "mqttUrl" $s.mqttUrl "kafkaSaslPassword" $s.kafkaSaslPassword "upstreamApiKey" $s.upstreamApiKey "secretsEncryptionKey" $s.secretsEncryptionKey | toJson | sha256sum }}
{{- end }}
