{{/*
The pod template shared by the StatefulSet (SQLite) and the Deployment (PostgreSQL).
*/}}
{{- define "boxrelay.podTemplate" -}}
metadata:
  labels:
    {{- include "boxrelay.selectorLabels" . | nindent 4 }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    checksum/restart: {{ include "boxrelay.restartChecksum" . }}
    {{- with .Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "boxrelay.serviceAccountName" . }}
  terminationGracePeriodSeconds: {{ int .Values.terminationGracePeriodSeconds }}
  {{- include "boxrelay.podCommon" . | nindent 2 }}
  containers:
    - name: boxrelay
      # The image's ENTRYPOINT is `node bin/boxrelay.js`; `serve` migrates, then serves.
      args: ["serve"]
      ports:
        - name: http
          containerPort: {{ int .Values.config.port }}
          protocol: TCP
        - name: internal
          containerPort: {{ int .Values.config.internalPort }}
          protocol: TCP
      {{- with .Values.startupProbe }}
      startupProbe:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.livenessProbe }}
      livenessProbe:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.readinessProbe }}
      readinessProbe:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- if gt (int .Values.preStopSleepSeconds) 0 }}
      lifecycle:
        preStop:
          exec:
            command: ["sleep", "{{ int .Values.preStopSleepSeconds }}"]
      {{- end }}
      {{- include "boxrelay.containerCommon" . | nindent 6 }}
  volumes:
    {{- include "boxrelay.volumes" . | nindent 4 }}
{{- end }}

{{/*
What the relay's pods and the migration Job's pod share (migrate-job.yaml): where they run and how.
*/}}
{{- define "boxrelay.podCommon" -}}
automountServiceAccountToken: false
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The container's image, environment, resources and mounts, the same in the relay and the migration Job. */}}
{{- define "boxrelay.containerCommon" -}}
{{- $s := .Values.secrets -}}
image: {{ include "boxrelay.image" . | quote }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
env:
  {{- include "boxrelay.env" . | trim | nindent 2 }}
  {{- with .Values.extraEnv }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
resources:
  {{- toYaml .Values.resources | nindent 2 }}
securityContext:
  {{- toYaml .Values.securityContext | nindent 2 }}
volumeMounts:
  - name: tmp
    mountPath: /tmp
  {{- if not (include "boxrelay.usePostgres" .) }}
  - name: data
    mountPath: /data
  {{- end }}
  {{- if .Values.backup.enabled }}
  - name: backups
    mountPath: /backups
  {{- end }}
  {{- if include "boxrelay.hasSigningSecrets" . }}
  # Whole directory, no subPath: Secret updates reach the file (rotation without restart).
  - name: signing-secrets
    mountPath: /etc/boxrelay/signing
    readOnly: true
  {{- end }}
  {{- if include "boxrelay.hasHooks" . }}
  - name: hooks
    mountPath: /etc/boxrelay/hooks
    readOnly: true
  {{- end }}
  {{- if include "boxrelay.hasAccounts" . }}
  - name: accounts
    mountPath: /etc/boxrelay/accounts
    readOnly: true
  {{- end }}
  {{- if eq $s.nats.auth "creds" }}
  - name: nats-creds
    mountPath: /etc/boxrelay/nats
    readOnly: true
  {{- end }}
  {{- with .Values.extraVolumeMounts }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

{{/* The pod's volumes (the SQLite volume aside: the StatefulSet's claim template). */}}
{{- define "boxrelay.volumes" -}}
{{- $s := .Values.secrets }}
{{- $own := include "boxrelay.ownSecret" . -}}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpSizeLimit }}
{{- if .Values.backup.enabled }}
- name: backups
  persistentVolumeClaim:
    claimName: {{ include "boxrelay.fullname" . }}-backups
{{- end }}
{{- if include "boxrelay.hasSigningSecrets" . }}
- name: signing-secrets
  secret:
    secretName: {{ $s.signing.existingSecret | default $own }}
    items:
      - key: {{ $s.signing.key }}
        path: secrets
{{- end }}
{{- if include "boxrelay.hasHooks" . }}
- name: hooks
  secret:
    secretName: {{ $s.hooks.existingSecret | default $own }}
    items:
      - key: {{ $s.hooks.key }}
        path: hooks.yaml
{{- end }}
{{- if include "boxrelay.hasAccounts" . }}
- name: accounts
  secret:
    secretName: {{ $s.accounts.existingSecret | default $own }}
    items:
      - key: {{ $s.accounts.key }}
        path: accounts.yaml
{{- end }}
{{- if eq $s.nats.auth "creds" }}
- name: nats-creds
  secret:
    secretName: {{ $s.nats.existingSecret | default $own }}
    items:
      - key: {{ $s.nats.credsKey }}
        path: nats.creds
{{- end }}
{{- with .Values.extraVolumes }}
{{- toYaml . | nindent 0 }}
{{- end }}
{{- end }}
