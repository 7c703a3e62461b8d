{{/* Names, labels and the pieces every Lockgate container shares. */}}

{{- define "lockgate.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The name of one component's objects: <fullname>-<component>. */}}
{{- define "lockgate.componentName" -}}
{{- printf "%s-%s" (include "lockgate.fullname" .root) .component -}}
{{- end -}}

{{- define "lockgate.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "lockgate.labels" -}}
{{ include "lockgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{- define "lockgate.image" -}}
{{ printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end -}}

{{/* With tls.enabled, server flags: serve TLS, and with `mutual` require client certificates. */}}
{{- define "lockgate.serverTlsArgs" -}}
- --tls-cert=/etc/lockgate/tls/tls.crt
- --tls-key=/etc/lockgate/tls/tls.key
{{- if .Values.tls.mutual }}
- --tls-client-ca=/etc/lockgate/tls/ca.crt
{{- end }}
{{- end -}}

{{/* With tls.enabled, client flags: verify the other services against ca.crt, and present our certificate. */}}
{{- define "lockgate.clientTlsArgs" -}}
- --tls-ca=/etc/lockgate/tls/ca.crt
{{- if .Values.tls.mutual }}
- --tls-client-cert=/etc/lockgate/tls/tls.crt
- --tls-client-key=/etc/lockgate/tls/tls.key
{{- end }}
{{- end -}}

{{/* Authentication (with tls.enabled and auth.enabled): the token file every server checks, and
the token a client sends (`tokenFile`, a key of the auth Secret). Otherwise the services serve a
non-loopback address without both, which they refuse unless told --insecure: said here, once. */}}
{{- define "lockgate.accessArgs" -}}
{{- if and .root.Values.tls.enabled .root.Values.auth.enabled }}
- --auth-tokens=/etc/lockgate/auth/tokens.yaml
{{- if .tokenFile }}
- --token-file=/etc/lockgate/auth/{{ .tokenFile }}
{{- end }}
{{- else }}
- --insecure
{{- end }}
{{- end -}}

{{/* Probes on grpc.health.v1 at .port; TCP when TLS is on (kubelet's gRPC probe has no TLS). */}}
{{- define "lockgate.probes" -}}
{{- $check := dict "grpc" (dict "port" .port) -}}
{{- if .root.Values.tls.enabled -}}
{{- $check = dict "tcpSocket" (dict "port" .port) -}}
{{- end -}}
startupProbe:
  {{- toYaml $check | nindent 2 }}
  periodSeconds: 5
  failureThreshold: {{ div (.startupSeconds | default 60) 5 }}
readinessProbe:
  {{- toYaml $check | nindent 2 }}
  periodSeconds: 5
  failureThreshold: 2
livenessProbe:
  {{- toYaml $check | nindent 2 }}
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 6
{{- end -}}

{{/* The database Secret's URL (and PGPASSWORD) as environment variables. */}}
{{- define "lockgate.databaseEnv" -}}
- name: LOCKGATE_DB_URL
  valueFrom:
    secretKeyRef:
      name: {{ required "a database Secret (database.existingSecret) is required" .existingSecret }}
      key: {{ .urlKey }}
{{- if .passwordKey }}
- name: PGPASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .existingSecret }}
      key: {{ .passwordKey }}
{{- end }}
{{- end -}}

{{/* Writable scratch space under a read-only root file system, and the TLS Secret. */}}
{{- define "lockgate.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
- name: home
  mountPath: /var/lib/lockgate
{{- if .root.Values.tls.enabled }}
- name: tls
  mountPath: /etc/lockgate/tls
  readOnly: true
{{- end }}
{{- if and .root.Values.tls.enabled .root.Values.auth.enabled }}
- name: auth
  mountPath: /etc/lockgate/auth
  readOnly: true
{{- end }}
{{- end -}}

{{- define "lockgate.volumes" -}}
- name: tmp
  emptyDir: {}
- name: home
  emptyDir: {}
{{- if .root.Values.tls.enabled }}
- name: tls
  secret:
    secretName: {{ .secret }}
    defaultMode: 0440
{{- end }}
{{- if and .root.Values.tls.enabled .root.Values.auth.enabled }}
- name: auth
  secret:
    secretName: {{ .root.Values.auth.secret }}
    defaultMode: 0440
{{- end }}
{{- end -}}

{{/* Pod placement and security, shared by every workload. */}}
{{- define "lockgate.podSpecCommon" -}}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .root.Values.podSecurityContext | nindent 2 }}
{{- with .values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
