{{/*
The pod template shared by the StatefulSet (SQLite) and the Deployment (PostgreSQL).
*/}}
{{- define "boxrelay.podTemplate" -}}
{{- $s := .Values.secrets }}
{{- $own := include "boxrelay.secretName" . }}
{{- $sqlite := not (include "boxrelay.usePostgres" .) }}
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
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  serviceAccountName: {{ include "boxrelay.serviceAccountName" . }}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: {{ int .Values.terminationGracePeriodSeconds }}
  {{- with .Values.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  securityContext:
    {{- toYaml .Values.podSecurityContext | nindent 4 }}
  containers:
    - name: boxrelay
      image: {{ include "boxrelay.image" . | quote }}
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      # The image's ENTRYPOINT is `node bin/boxrelay.js`; `serve` migrates, then serves.
      args: ["serve"]
      ports:
        - name: http
          containerPort: {{ int .Values.config.port }}
          protocol: TCP
        - name: internal
          containerPort: {{ int .Values.config.internalPort }}
          protocol: TCP
      env:
        {{- include "boxrelay.env" . | trim | nindent 8 }}
        {{- with .Values.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
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
      resources:
        {{- toYaml .Values.resources | nindent 8 }}
      securityContext:
        {{- toYaml .Values.securityContext | nindent 8 }}
      volumeMounts:
        - name: tmp
          mountPath: /tmp
        {{- if $sqlite }}
        - name: data
          mountPath: /data
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
        {{- if eq $s.nats.auth "creds" }}
        - name: nats-creds
          mountPath: /etc/boxrelay/nats
          readOnly: true
        {{- end }}
        {{- with .Values.extraVolumeMounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
  volumes:
    - name: tmp
      emptyDir:
        sizeLimit: {{ .Values.tmpSizeLimit }}
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
    {{- if eq $s.nats.auth "creds" }}
    - name: nats-creds
      secret:
        secretName: {{ $s.nats.existingSecret | default $own }}
        items:
          - key: {{ $s.nats.credsKey }}
            path: nats.creds
    {{- end }}
    {{- with .Values.extraVolumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.topologySpreadConstraints }}
  topologySpreadConstraints:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
