{{/* Chart name, truncated to the 63-character DNS label limit. */}}
{{- define "ragspine.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "ragspine.fullname" -}}
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

{{- define "ragspine.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "ragspine.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector labels of one role: call with (dict "ctx" $ "role" "front"). */}}
{{- define "ragspine.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ragspine.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .role }}
{{- end }}

{{- define "ragspine.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "ragspine.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Image reference of one flavour: call with (dict "ctx" $ "image" .Values.image.cpu). */}}
{{- define "ragspine.image" -}}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) }}
{{- end }}

{{- define "ragspine.workerImage" -}}
{{- if .Values.cpuOnly }}
{{- include "ragspine.image" (dict "ctx" . "image" .Values.image.cpu) }}
{{- else }}
{{- include "ragspine.image" (dict "ctx" . "image" .Values.image.gpu) }}
{{- end }}
{{- end }}

{{- define "ragspine.authSecretName" -}}
{{- default (printf "%s-auth" (include "ragspine.fullname" .)) .Values.auth.existingSecret }}
{{- end }}

{{- define "ragspine.storeSecretName" -}}
{{- default (printf "%s-store" (include "ragspine.fullname" .)) .Values.store.postgresql.existingSecret }}
{{- end }}

{{/*
Refuse value combinations that would deploy something broken. values.schema.json says the same; this
repeats it for installs that skip schema validation.
*/}}
{{- define "ragspine.validate" -}}
{{- if eq .Values.store.backend "sqlite" }}
{{- if or (gt (int .Values.front.replicas) 1) .Values.front.autoscaling.enabled }}
{{- fail "store.backend=sqlite keeps one database file on one volume: set front.replicas=1 and front.autoscaling.enabled=false, or use store.backend=postgresql for several front replicas" }}
{{- end }}
{{- else }}
{{- if and (not .Values.store.postgresql.existingSecret) (not .Values.store.postgresql.dsn) }}
{{- fail "store.backend=postgresql needs a DSN: set store.postgresql.existingSecret (a Secret with key store.postgresql.secretKey) or store.postgresql.dsn" }}
{{- end }}
{{- end }}
{{- if and .Values.front.autoscaling.enabled (gt (int .Values.front.autoscaling.minReplicas) (int .Values.front.autoscaling.maxReplicas)) }}
{{- fail "front.autoscaling.minReplicas must not exceed front.autoscaling.maxReplicas" }}
{{- end }}
{{- if and .Values.tls.enabled (not .Values.tls.secretName) }}
{{- fail "tls.enabled=true needs tls.secretName (a kubernetes.io/tls Secret)" }}
{{- end }}
{{- end }}

{{/* Environment shared by both roles. */}}
{{- define "ragspine.commonEnv" -}}
- name: RAGSPINE_HOST
  value: "0.0.0.0"
- name: RAGSPINE_WORKER_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "ragspine.authSecretName" . }}
      key: worker-token
{{- if .Values.tls.enabled }}
- name: RAGSPINE_TLS_CERT_FILE
  value: /etc/ragspine/tls/tls.crt
- name: RAGSPINE_TLS_KEY_FILE
  value: /etc/ragspine/tls/tls.key
{{- end }}
{{- end }}

{{/*
Native gRPC probes when the port speaks plaintext; the kubelet cannot do TLS on gRPC probes, so TCP then.
Call with (dict "port" 50051 "service" "ragspine.v1.RetrievalService" "tls" bool).
*/}}
{{- define "ragspine.probeAction" -}}
{{- if .tls -}}
tcpSocket:
  port: grpc
{{- else -}}
grpc:
  port: {{ .port }}
  service: {{ .service | quote }}
{{- end }}
{{- end }}
