{{/*
Chart name, truncated to the 63 characters a label value allows.
*/}}
{{- define "gpurs.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Resource name prefix. Kept at 40 characters so that "<prefix>-recommender-namespaced" and similar
suffixed names still fit the 63-character limit of names that become labels.
*/}}
{{- define "gpurs.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "gpurs.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every resource.
*/}}
{{- define "gpurs.labels" -}}
helm.sh/chart: {{ include "gpurs.chart" . }}
app.kubernetes.io/name: {{ include "gpurs.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpu-rightsizer
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Selector labels of one component. Call with (dict "ctx" $ "component" "recommender").
*/}}
{{- define "gpurs.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpurs.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
All labels of one component. Call with (dict "ctx" $ "component" "recommender").
*/}}
{{- define "gpurs.componentLabels" -}}
{{ include "gpurs.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "gpurs.recommender.serviceAccountName" -}}
{{- default (printf "%s-recommender" (include "gpurs.fullname" .)) .Values.recommender.serviceAccountName }}
{{- end }}

{{- define "gpurs.actuator.serviceAccountName" -}}
{{- default (printf "%s-actuator" (include "gpurs.fullname" .)) .Values.actuator.serviceAccountName }}
{{- end }}

{{- define "gpurs.agent.serviceAccountName" -}}
{{- default (printf "%s-agent" (include "gpurs.fullname" .)) .Values.agent.serviceAccountName }}
{{- end }}

{{/*
Name of the dcgm-exporter counters ConfigMap (the GPU Operator's dcgmExporter.config.name).
*/}}
{{- define "gpurs.dcgmCountersName" -}}
{{- .Values.dcgmExporter.counters.name | default (printf "%s-dcgm-counters" (include "gpurs.fullname" .)) }}
{{- end }}

{{/*
Namespace of the agent's objects: its own (agent.namespace), so that only it needs the "privileged" Pod
Security level, or the release namespace.
*/}}
{{- define "gpurs.agent.namespace" -}}
{{- .Values.agent.namespace | default .Release.Namespace }}
{{- end }}

{{- define "gpurs.metricsServiceName" -}}
{{- printf "%s-metrics" (include "gpurs.fullname" .) }}
{{- end }}

{{/*
Container image: repository@digest when a digest is given, else repository:tag (tag defaults to appVersion).
*/}}
{{- define "gpurs.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
Cross-field checks that a JSON schema cannot express clearly. Each failure names the value to change.
Included once from every template that depends on them (Helm evaluates all templates, so it fails early).
*/}}
{{- define "gpurs.validate" -}}
{{- if and .Values.actuator.enabled (not .Values.actuator.clusterWide) (empty .Values.actuator.namespaces) }}
{{- fail "actuator.namespaces must list at least one namespace when actuator.enabled=true (or set actuator.clusterWide=true to allow patching in every namespace)" }}
{{- end }}
{{- if and .Values.actuator.clusterWide (not (empty .Values.actuator.namespaces)) }}
{{- fail "actuator.namespaces and actuator.clusterWide=true contradict each other: clusterWide already covers every namespace; empty the list or set clusterWide=false" }}
{{- end }}
{{- if ne (len .Values.watch.namespaces) (len (uniq .Values.watch.namespaces)) }}
{{- fail "watch.namespaces lists a namespace more than once" }}
{{- end }}
{{- if ne (len .Values.actuator.namespaces) (len (uniq .Values.actuator.namespaces)) }}
{{- fail "actuator.namespaces lists a namespace more than once" }}
{{- end }}
{{- if and .Values.actuator.enabled (not (empty .Values.watch.namespaces)) }}
{{- range .Values.actuator.namespaces }}
{{- if not (has . $.Values.watch.namespaces) }}
{{- fail (printf "actuator.namespaces contains %q, which is not in watch.namespaces: the recommender writes no recommendations there, so the actuator would have nothing to apply" .) }}
{{- end }}
{{- end }}
{{- end }}
{{- if ne (len .Values.actuator.workloadKinds) (len (uniq .Values.actuator.workloadKinds)) }}
{{- fail "actuator.workloadKinds lists a kind more than once" }}
{{- end }}
{{- if and .Values.agent.profilingAsAdmin (not .Values.agent.enabled) }}
{{- fail "agent.profilingAsAdmin=true has no effect unless agent.enabled=true" }}
{{- end }}
{{- if and .Values.agent.enabled .Values.agent.hostPID (or .Values.agent.podResources.enabled .Values.agent.profilingAsAdmin) }}
{{- fail "agent.hostPID=true needs the agent to run as its own non-root user (agent.runAsUser), but agent.podResources.enabled and agent.profilingAsAdmin run it as root: a root process sharing the host's PID namespace could read other root processes' /proc. Set agent.podResources.enabled=false (pods are then found through their processes' cgroups) and agent.profilingAsAdmin=false" }}
{{- end }}
{{- if and .Values.dcgmExporter.counters.enabled (not .Values.dcgmExporter.counters.namespace) }}
{{- fail "dcgmExporter.counters.namespace must name the GPU Operator's namespace (usually gpu-operator): the GPU Operator mounts the ConfigMap named by its dcgmExporter.config.name only from its own namespace, and dcgm-exporter pods cannot start without it" }}
{{- end }}
{{- if and .Values.agent.enabled (eq (int .Values.agent.runAsUser) 65532) }}
{{- fail "agent.runAsUser must not be 65532, the operator's uid: with hostPID the agent could read the operator's processes (its ServiceAccount token)" }}
{{- end }}
{{- end }}

{{/*
Prometheus connection: container args. Call with the root context.
*/}}
{{- define "gpurs.operatorArgs" -}}
- --interval={{ .Values.analysis.interval }}
- --window={{ .Values.analysis.window }}
- --metrics-port={{ .Values.service.metricsPort }}
- --liveness=http://0.0.0.0:{{ .Values.service.healthPort }}/healthz
{{- if eq .Values.logLevel "DEBUG" }}
- --verbose
{{- end }}
- --prometheus-url={{ .Values.prometheus.url }}
{{- if .Values.prometheus.bearerToken.secretName }}
- --prometheus-token-file=/var/run/secrets/gpu-rightsizer/prometheus/{{ .Values.prometheus.bearerToken.key }}
{{- end }}
{{- if .Values.prometheus.caCertificate.configMapName }}
- --prometheus-ca-file=/etc/gpu-rightsizer/prometheus-ca/{{ .Values.prometheus.caCertificate.key }}
{{- end }}
- --prometheus-timeout={{ .Values.prometheus.timeout }}
{{- with .Values.prometheus.step }}
- --prometheus-step={{ . }}
{{- end }}
{{- range .Values.prometheus.extraMatchers }}
- {{ printf "--prometheus-label=%s" . | quote }}
{{- end }}
{{- range .Values.prometheus.trustedGpuTargets }}
- {{ printf "--trusted-gpu-target=%s" . | quote }}
{{- else }}
- --trusted-gpu-target=namespace=gpu-operator,service=nvidia-dcgm-exporter
{{- if .Values.agent.enabled }}
- {{ printf "--trusted-gpu-target=namespace=%s,pod=~\"%s-agent-.*\"" (include "gpurs.agent.namespace" .) (include "gpurs.fullname" .) | quote }}
{{- end }}
{{- end }}
{{- if .Values.prometheus.gpuHonorLabels }}
- --gpu-honor-labels
{{- end }}
{{- end }}

{{/*
Operator environment shared by the recommender and the actuator.
*/}}
{{- define "gpurs.operatorEnv" -}}
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: HOME
  value: /tmp
{{- end }}

{{/*
Volumes shared by the operator pods: /tmp, and the Prometheus credentials when configured.
*/}}
{{- define "gpurs.operatorVolumes" -}}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpSizeLimit }}
{{- if .Values.prometheus.bearerToken.secretName }}
- name: prometheus-token
  secret:
    secretName: {{ .Values.prometheus.bearerToken.secretName }}
    defaultMode: 0440
    items:
      - key: {{ .Values.prometheus.bearerToken.key }}
        path: {{ .Values.prometheus.bearerToken.key }}
{{- end }}
{{- if .Values.prometheus.caCertificate.configMapName }}
- name: prometheus-ca
  configMap:
    name: {{ .Values.prometheus.caCertificate.configMapName }}
    defaultMode: 0444
    items:
      - key: {{ .Values.prometheus.caCertificate.key }}
        path: {{ .Values.prometheus.caCertificate.key }}
{{- end }}
{{- end }}

{{- define "gpurs.operatorVolumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if .Values.prometheus.bearerToken.secretName }}
- name: prometheus-token
  mountPath: /var/run/secrets/gpu-rightsizer/prometheus
  readOnly: true
{{- end }}
{{- if .Values.prometheus.caCertificate.configMapName }}
- name: prometheus-ca
  mountPath: /etc/gpu-rightsizer/prometheus-ca
  readOnly: true
{{- end }}
{{- end }}

{{/*
Probes of the operator containers (kopf's liveness endpoint).
*/}}
{{- define "gpurs.operatorProbes" -}}
livenessProbe:
  httpGet:
    path: /healthz
    port: health
  initialDelaySeconds: 30
  periodSeconds: 30
  timeoutSeconds: 5
  failureThreshold: 4
readinessProbe:
  httpGet:
    path: /healthz
    port: health
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 3
{{- end }}

{{- define "gpurs.operatorPorts" -}}
- name: metrics
  containerPort: {{ .Values.service.metricsPort }}
  protocol: TCP
- name: health
  containerPort: {{ .Values.service.healthPort }}
  protocol: TCP
{{- end }}
