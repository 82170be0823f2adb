import type { ConfigKey } from './schema.js';

/**
 * What each setting of the schema means, beside it, for `npm run docs` (docs/reference/configuration.md).
 * Defaults are read from the schema itself; a test fails while a setting has no line here.
 */
export const configDescriptions: Partial<Record<ConfigKey, string>> = {
  port: 'public listener: `POST /webhooks`, `/healthz`, `/readyz` only',
  host: 'address of the public listener',
  internalPort: 'internal listener: `/metrics`, `/healthz`, `/readyz` (with checks), `/admin/*`, `/console`',
  internalHost: 'address of the internal listener; keep the port inside the cluster',
  secrets: 'comma-separated signing secrets (`whsec_…`); the first is the current one',
  secretsFile:
    'one secret a line, optionally followed by an ISO-8601 time with a zone after which it is refused; `#` comments; re-read without a restart (also across a Kubernetes Secret\'s symlink swap); a bad file keeps the last good set and logs an error',
  secretsReloadMs: 'how often the secrets file is re-read (a change is seen within this time)',
  toleranceSeconds: 'allowed distance between `X-Service-Timestamp` and now, both directions (exactly the tolerance is accepted)',
  maxBodyBytes: 'larger bodies get `413` before any HMAC work',
  database: 'SQLite file, or a `postgres://` URL for several replicas',
  sqliteSynchronous:
    'SQLite durability: `FULL` (and `EXTRA`) make every `200` survive a power loss; `NORMAL` only survives a process crash. WAL checkpoints run in a worker thread, off the event loop that answers webhooks',
  busyTimeoutMs:
    'how long a SQLite write waits for a lock held by another process (e.g. a CLI command) before the delivery is answered `503`; the wait blocks the thread that commits the deliveries (the storage thread; with `BOXRELAY_FANOUT_THREAD=inline`, the event loop that receives webhooks), so every delivery behind it waits too: keep it short',
  databaseTimeoutMs:
    'PostgreSQL: the longest wait for a connection, a free pool slot, one statement\'s answer, or a delivery\'s wait for its group\'s statement to start, after which the delivery is answered `503`; migrations are not bounded by it',
  databasePoolSize: 'PostgreSQL: the pooled connections per replica, half for the fan-out thread (its log reads, claims and attempts), the rest for the admin API and retention (at least one each); the delivery writer and the log sequencer each have one more of their own',
  databaseMaxWaiting: 'PostgreSQL: queries that may wait for a slot of either pool (the admin API and retention, the fan-out); one more is refused at once. Deliveries never wait for the pool: they are committed in groups on a connection of their own',
  retentionDays: 'stored deliveries older than this are pruned; this is also the dedup window',
  backupDir:
    'SQLite: a directory where the relay writes a `boxrelay backup` of its database every `BOXRELAY_BACKUP_INTERVAL` while it serves (`boxrelay-<UTC time>.db`, created when missing); unset: no scheduled backups. Refused with PostgreSQL (use `pg_dump`)',
  backupInterval: 'time between scheduled backups (`1m` or more: `6h`, `1d`); the first comes a minute after start unless the newest backup in the directory is younger than this; a failed one is logged and tried again after this time',
  backupKeep: 'the scheduled backups kept: after each one, the oldest the relay wrote beyond this many are deleted (other files in the directory never are)',
  natsUrl: 'e.g. `nats://127.0.0.1:4222`; unset: the NATS sink is off',
  natsSubjectPrefix: 'first subject token(s): `<prefix>.<type>.<boxId>`',
  natsMode: '`jetstream` (publish with ack) or `core` (fire and forget)',
  natsStream: 'stream created when missing, unless one already captures `<prefix>.>`',
  natsDuplicateWindow: 'duplicate window of a stream the relay creates (`30s`, `10m`, `1h`, `1d`)',
  natsOrdering: '`per-box`: NATS gets one event of a box at a time, in accepted order',
  natsMaxAge: 'messages older than this leave a stream the relay creates; unset: the retention window; `0` keeps them forever',
  natsCredsFile: 'NATS credentials file (`.creds`)',
  natsToken: 'NATS token authentication',
  natsUser: 'NATS user (with `BOXRELAY_NATS_PASSWORD`)',
  natsPassword: 'NATS password (with `BOXRELAY_NATS_USER`)',
  natsTlsCaFile: 'CA (PEM) the NATS server\'s certificate is checked against instead of the system\'s',
  amqpUrl: '`amqp://user:password@host:5672/vhost` or `amqps://`; unset: the RabbitMQ sink is off',
  amqpExchange: 'durable `topic` exchange, declared when missing (at start and after every reconnect)',
  amqpQueue: 'a durable queue of that name bound with `#`, declared too, so nothing is dropped before consumers bind',
  amqpOrdering: '`per-box`: RabbitMQ gets one event of a box at a time, in accepted order',
  redisUrl: '`redis://` or `rediss://`; unset: the Redis Streams sink is off',
  redisStream: 'the stream\'s key (duplicate-check keys are `<stream>:seen:<event id>`)',
  redisMaxlen: 'the stream is trimmed to about this many entries (`MAXLEN ~`); `0` never trims',
  redisDuplicateWindow: 'a re-send of an event id within it adds no entry',
  redisOrdering: '`per-box`: Redis gets one event of a box at a time, in accepted order',
  mqttUrl: '`mqtt://` or `mqtts://` (MQTT 5, falling back to 3.1.1); unset: the MQTT sink is off',
  mqttTopicPrefix: 'first topic level(s)',
  mqttOrdering: '`per-box`: MQTT gets one event of a box at a time, in accepted order',
  kafkaBrokers: 'comma-separated `host:port` bootstrap brokers; unset: the Kafka sink is off (docs/buses.md)',
  kafkaTopic: 'the topic every event goes to',
  kafkaClientId: 'the client id the brokers see',
  kafkaSaslMechanism: '`plain`, `scram-sha-256` or `scram-sha-512`; set with the username and password, the three go together',
  kafkaSaslUsername: 'the SASL user (with the mechanism and password)',
  kafkaSaslPassword: 'the SASL password (with the mechanism and username); never logged',
  kafkaTls: 'TLS to the brokers',
  kafkaTlsCaFile: 'a CA (PEM, read at start-up; needs `BOXRELAY_KAFKA_TLS=true`) instead of the system\'s',
  kafkaOrdering: '`per-box`: Kafka gets one event of a box at a time, in accepted order',
  awsRegion: 'the AWS region of the SQS, SNS and S3 sinks; unset: `AWS_REGION`, else `us-east-1`. Credentials come from the AWS SDK\'s default chain only (environment, shared files, web identity as on EKS, container and instance metadata)',
  awsEndpoint: 'an endpoint for SQS, SNS and S3 instead of AWS\'s (a VPC endpoint, LocalStack, an S3-compatible store; S3 is then addressed path-style)',
  sqsQueueUrl: 'the queue every event goes to (a FIFO queue, `.fifo`: group id the box id, deduplication id the event id); unset: the SQS sink is off (docs/buses.md)',
  sqsOrdering: '`per-box`: SQS gets one event of a box at a time, in accepted order (a FIFO queue always does)',
  snsTopicArn: 'the topic every event goes to (a FIFO topic, `.fifo`: group id the box id, deduplication id the event id); unset: the SNS sink is off (docs/buses.md)',
  snsOrdering: '`per-box`: SNS gets one event of a box at a time, in accepted order (a FIFO topic always does)',
  s3Archive: '`s3://bucket/prefix`: every event is archived there as gzip NDJSON objects under `<prefix>/<yyyy>/<mm>/<dd>/<HH>/<first event id>.ndjson.gz`; unset: the archive is off (docs/buses.md)',
  s3ArchiveMaxEvents: 'the most events in one archive object',
  s3ArchiveMaxAge: 'the longest an event waits before the archive object holding it is written',
  outboxPollMs:
    'how often the dispatcher looks for work written elsewhere (CLI, other replicas) and for expired leases; each commit wakes it at once',
  outboxLeaseMs:
    'the longest run of one event\'s attempts in process before further retries are scheduled in the database; unset: per sink, its quick retries\' attempt timeouts and waits plus 30 s. Leases on fan-out work last 8 s (or this, if shorter) and are renewed while their replica lives, so a replica that dies hands its work to the others within about 10 s. Keep it above twice the longest attempt timeout (the relay warns at start)',
  unservedSinkGrace:
    'pending work for a sink this replica does not serve is left to the replicas that serve it, and set aside as dead letters once none has served it for this long (SQLite: from the start, beside the deliveries)',
  attempts:
    'which delivery attempts are recorded for `GET /admin/events/:id/attempts` and sink health (contract section 16): `all`, `failed` (failures only; health counts successes from the delivery counts) or `off`',
  fanoutThread:
    'where the dispatcher and its sinks run: `worker`, a worker thread, so the thread that receives webhooks only receives (on a SQLite file a storage thread then commits every write, the deliveries\' and the fan-out\'s, and the other threads\' connections only read); `inline`, on the receiver\'s event loop',
  fanoutNiceness:
    'how much nicer than the process the fan-out worker thread runs (Linux, 0 to 19; `0` keeps it level): on short cores a backlog drain then takes what answering webhooks leaves. It ranks the thread below every thread of its cgroup, so give the relay one of its own (a container or a systemd service do)',
  fanoutHeapMb:
    'the fan-out worker thread\'s JavaScript heap ceiling (old generation, MB, at least 128): the garbage of a long drain or replay is collected within it rather than kept resident. A worker that needs more than this is restarted (its rows are given back; nothing acknowledged is lost): raise it for hooks with many large events in flight',
  hooksFile: 'YAML/JSON list of outgoing HTTP hooks (docs/hooks.md)',
  hooks: 'the hook list inline, in the `BOXRELAY_CONFIG` file only (or use `BOXRELAY_HOOKS_FILE`)',
  accountsFile:
    'YAML/JSON list of further Sandbox Service accounts, each with its own endpoint `POST /webhooks/<name>`, signing secrets (`secrets` or `secretsFile`, reloaded as `BOXRELAY_SECRETS_FILE`), `upstreamBaseUrl`/`upstreamApiKey`, `cloudEventsSource` (default `<BOXRELAY_SOURCE>/<name>`) and `natsSubjectPrefix`; read at start (docs/accounts.md)',
  accounts: 'the account list inline, in the `BOXRELAY_CONFIG` file only (or use `BOXRELAY_ACCOUNTS_FILE`)',
  source: 'CloudEvents `source` of relayed events',
  adminToken:
    'bearer token for `/admin/*` and the console; unset: both are off (404); at least 32 characters (shorter stops start-up, exit 2): make one with `openssl rand -hex 32`',
  upstreamBaseUrl: 'the Sandbox Service API root (ending in `/v1`), for `boxrelay upstream …` and reconciliation',
  upstreamApiKey: 'account-wide API key of the Sandbox Service, for `boxrelay upstream …` and reconciliation',
  secretsEncryptionKey:
    'encrypts signing secrets stored in the database by `boxrelay upstream` (AES-256-GCM): `base64:<32 bytes>`, or a passphrase stretched with scrypt; unset: plain text',
  reconcileInterval: 'time between reconciliation runs (`30s`, `5m`, `1h`); `0` or `off` turns the schedule off (runs on demand still work)',
  reconcileMaxRps: 'the most upstream API requests a reconciliation run makes per second (retries included)',
  reconcileMaxPages: 'a run that needs more upstream pages than this (box list and histories together) ends failed, naming the setting',
  reconcileMaxDuration:
    'a run that takes longer ends failed, naming the setting (an upstream that keeps answering empty pages with new cursors cannot hold a run forever)',
  databaseSecretsRefreshMs:
    'how often database secrets are re-read without traffic (a delivery that matches no secret re-reads at once, at most once a second)',
  shutdownDelay:
    'on SIGTERM, how long `/readyz` answers 503 (both ports) while the relay still accepts and serves, so load balancers stop sending before it stops listening (`500ms`, `5s`, `1m`); `0` stops at once; a second SIGTERM or SIGINT ends it',
  shutdownTimeoutMs: 'after the shutdown delay, how long requests in flight and then the fan-out\'s calls may take before they are cut (one budget)',
  logLevel: 'pino level (`fatal` … `trace`, `silent`)',
};

/** Variables read outside the schema, each name in backticks (docs/reference/configuration.md lists them after it). */
export const otherVariables: Record<string, string> = {
  '`BOXRELAY_CONFIG`':
    'a YAML or JSON file of settings, keyed as in the table above (the "Config file key" column); variables override it',
  '`HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY` (or lower case, which wins)':
    'outbound proxy of hook requests and upstream API calls (contract section 14; docs/hooks.md)',
  '`OTEL_EXPORTER_OTLP_ENDPOINT` and the other standard `OTEL_*` variables': 'tracing, off unless an endpoint is set (docs/operations.md, "Tracing")',
};
