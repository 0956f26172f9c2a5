{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "rag-monitor.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the release's objects: <release>-<chart> unless the release name has it. */}}
{{- define "rag-monitor.fullname" -}}
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

{{- define "rag-monitor.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The standard app.kubernetes.io labels. */}}
{{- define "rag-monitor.labels" -}}
helm.sh/chart: {{ include "rag-monitor.chart" . }}
{{ include "rag-monitor.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: rag-monitor
{{- end }}

{{- define "rag-monitor.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rag-monitor.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The daemon's pods only (golden CronJob pods share the selector labels, not this). */}}
{{- define "rag-monitor.daemonSelectorLabels" -}}
{{ include "rag-monitor.selectorLabels" . }}
app.kubernetes.io/component: daemon
{{- end }}

{{- define "rag-monitor.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "rag-monitor.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "rag-monitor.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "rag-monitor.configPath" -}}/etc/rag-monitor/config.yaml{{- end }}

{{/* The Secret holding the secret values: the existing one, or the chart's. */}}
{{- define "rag-monitor.secretName" -}}
{{- default (include "rag-monitor.fullname" .) .Values.secrets.existingSecret }}
{{- end }}

{{/* The daemon's HTTP port, from the config file (http.port). */}}
{{- define "rag-monitor.httpPort" -}}
{{- dig "http" "port" 9820 .Values.config | int }}
{{- end }}

{{/*
The shutdown deadline in whole seconds: RAGMON_SHUTDOWN__DEADLINE_SECONDS from `env` when set
(the environment wins over the file), else the config's shutdown.deadline_seconds, else 20.
*/}}
{{- define "rag-monitor.shutdownDeadline" -}}
{{- $deadline := dig "shutdown" "deadline_seconds" 20 .Values.config }}
{{- range .Values.env }}
{{- if and (eq .name "RAGMON_SHUTDOWN__DEADLINE_SECONDS") (hasKey . "value") }}
{{- $deadline = .value }}
{{- end }}
{{- end }}
{{- $deadline | float64 | ceil | int }}
{{- end }}

{{/* Termination grace period: longer than the shutdown deadline, or the chart refuses. */}}
{{- define "rag-monitor.terminationGracePeriod" -}}
{{- $deadline := include "rag-monitor.shutdownDeadline" . | int }}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds }}
{{- add $deadline (.Values.terminationGraceExtraSeconds | int) }}
{{- else }}
{{- $grace := .Values.terminationGracePeriodSeconds | int }}
{{- if le $grace $deadline }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must be longer than the shutdown deadline (%d s, shutdown.deadline_seconds)" $grace $deadline) }}
{{- end }}
{{- $grace }}
{{- end }}
{{- end }}

{{/* Environment shared by the daemon and the golden CronJobs: secrets first, then `env`. */}}
{{- define "rag-monitor.env" -}}
{{- $secret := include "rag-monitor.secretName" . }}
{{- $keys := .Values.secrets.keys -}}
- name: RAGMON_JUDGE__API_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $keys.judgeApiKey }}
      optional: true
- name: RAGMON_KAFKA__SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $keys.kafkaSaslPassword }}
      optional: true
- name: RAGMON_STORE__URL
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $keys.storeUrl }}
      optional: true
- name: HOME
  value: /tmp
- name: XDG_CACHE_HOME
  value: /tmp/.cache
{{- with .Values.env }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Volumes shared by the daemon and the golden CronJobs. */}}
{{- define "rag-monitor.volumes" -}}
- name: config
  configMap:
    name: {{ include "rag-monitor.fullname" . }}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmp.sizeLimit }}
- name: data
{{- if .Values.persistence.existingClaim }}
  persistentVolumeClaim:
    claimName: {{ .Values.persistence.existingClaim }}
{{- else }}
  emptyDir:
    sizeLimit: {{ .Values.persistence.sizeLimit }}
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "rag-monitor.volumeMounts" -}}
- name: config
  mountPath: /etc/rag-monitor
  readOnly: true
- name: tmp
  mountPath: /tmp
- name: data
  mountPath: {{ .Values.dataDir }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The daemon's configuration file: `config`, with kafka.single_replica set from replicaCount
unless given (one replica assembles OTLP in the process; several share it through the
internal topics). Turning it on with several replicas fails the render.
*/}}
{{- define "rag-monitor.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- $kafka := deepCopy (default (dict) $config.kafka) -}}
{{- if not (hasKey $kafka "single_replica") -}}
{{- $_ := set $kafka "single_replica" (eq (int .Values.replicaCount) 1) -}}
{{- end -}}
{{- if and $kafka.single_replica (gt (int .Values.replicaCount) 1) -}}
{{- fail (printf "config.kafka.single_replica is true with replicaCount %d: a trace's spans would be split between replicas; leave it unset or false" (int .Values.replicaCount)) -}}
{{- end -}}
{{- $_ := set $config "kafka" $kafka -}}
{{- toYaml $config -}}
{{- end -}}

{{/* "true" when the daemon runs in single-replica mode. */}}
{{- define "rag-monitor.singleReplica" -}}
{{- (include "rag-monitor.config" . | fromYaml).kafka.single_replica -}}
{{- end -}}
