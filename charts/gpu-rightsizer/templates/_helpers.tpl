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
Cross-field checks that a JSON schema cannot express clearly. Each failure names the value to change,
and each group is included by the template of the object its values configure, outside that template's
`if`, so Helm's error points there (agent values at agent-daemonset.yaml, and so on).
*/}}
{{- define "gpurs.validate.recommender" -}}
{{- if ne (len .Values.watch.namespaces) (len (uniq .Values.watch.namespaces)) }}
{{- fail "watch.namespaces lists a namespace more than once" }}
{{- end }}
{{- include "gpurs.validate.otherReleases" . }}
{{- end }}

{{- define "gpurs.validate.actuator" -}}
{{- if and .Values.actuator.enabled (not .Values.actuator.clusterWide) (empty .Values.actuator.namespaces) }}
{{- fail "actuator.namespaces must list at least one namespace when actuator.enabled=true (or set actuator.clusterWide=true to allow patching in every namespace)" }}
{{- end }}
{{- if and .Values.actuator.clusterWide (not (empty .Values.actuator.namespaces)) }}
{{- fail "actuator.namespaces and actuator.clusterWide=true contradict each other: clusterWide already covers every namespace; empty the list or set clusterWide=false" }}
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
{{- end }}

{{- define "gpurs.validate.agent" -}}
{{- if and .Values.agent.profilingAsAdmin (not .Values.agent.enabled) }}
{{- fail "agent.profilingAsAdmin=true has no effect unless agent.enabled=true" }}
{{- end }}
{{- if and .Values.agent.enabled .Values.agent.hostPID (or .Values.agent.podResources.enabled .Values.agent.profilingAsAdmin) }}
{{- fail "agent.hostPID=true needs the agent to run as its own non-root user (agent.runAsUser), but agent.podResources.enabled and agent.profilingAsAdmin run it as root: a root process sharing the host's PID namespace could read other root processes' /proc. Set agent.podResources.enabled=false (pods are then found through their processes' cgroups) and agent.profilingAsAdmin=false" }}
{{- end }}
{{- if and .Values.agent.enabled (eq (int .Values.agent.runAsUser) 65532) }}
{{- fail "agent.runAsUser must not be 65532, the operator's uid: with hostPID the agent could read the operator's processes (its ServiceAccount token)" }}
{{- end }}
{{- /* Against a cluster (kube-system exists; `helm template` sees none), a RuntimeClass that does not
exist would leave the DaemonSet at 0 pods with nothing but a FailedCreate event. */}}
{{- if and .Values.agent.enabled .Values.agent.runtimeClassName (lookup "v1" "Namespace" "" "kube-system") (not (lookup "node.k8s.io/v1" "RuntimeClass" "" .Values.agent.runtimeClassName)) }}
{{- fail (printf "agent.runtimeClassName=%s: the cluster has no RuntimeClass %q, so the agent's DaemonSet would run no pod (the GPU Operator creates RuntimeClass nvidia). Name an existing RuntimeClass, or set agent.runtimeClassName=\"\" to use the node's default runtime (which must then be the NVIDIA container runtime)" .Values.agent.runtimeClassName .Values.agent.runtimeClassName) }}
{{- end }}
{{- end }}

{{- define "gpurs.validate.dcgmCounters" -}}
{{- if and .Values.dcgmExporter.counters.enabled (not .Values.dcgmExporter.counters.namespace) }}
{{- fail "dcgmExporter.counters.namespace must name the GPU Operator's namespace (usually gpu-operator): the GPU Operator mounts the ConfigMap named by its dcgmExporter.config.name only from its own namespace, and dcgm-exporter pods cannot start without it" }}
{{- end }}
{{- end }}

{{- define "gpurs.validate.window" -}}
{{- if lt (float64 (include "gpurs.durationSeconds" .Values.analysis.window)) 300.0 }}
{{- fail (printf "analysis.window=%s is shorter than 5m: it becomes the default policy's spec.observation.window, which must be at least 5m. Use 5m or more (e.g. 6h, 24h)" .Values.analysis.window) }}
{{- end }}
{{- end }}

{{/*
Seconds in a duration such as 90s, 1h30m or 1.5h (units ns, us, ms, s, m, h, d, w), as a float string.
The schema checks the grammar; this adds the parts up for bounds a JSON schema cannot compute.
*/}}
{{- define "gpurs.durationSeconds" -}}
{{- $units := dict "ns" 0.000000001 "us" 0.000001 "µs" 0.000001 "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 "d" 86400.0 "w" 604800.0 }}
{{- $total := 0.0 }}
{{- range regexFindAll "[0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h|d|w)" . -1 }}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" . }}
{{- $total = addf $total (mulf (float64 $number) (get $units (trimPrefix $number .))) }}
{{- end }}
{{- $total }}
{{- end }}

{{/*
One recommender per namespace: another gpu-rightsizer release whose recommender watches a namespace this
one watches would write the same GPURecommendations. Its scope is read from its Deployment's arguments
(--all-namespaces or --namespace=NS). `helm template` sees no cluster, so nothing is checked there.
*/}}
{{- define "gpurs.validate.otherReleases" -}}
{{- $mine := .Values.watch.namespaces }}
{{- range $deployment := dig "items" list (lookup "apps/v1" "Deployment" "" "") }}
{{- $labels := dig "metadata" "labels" dict $deployment }}
{{- $release := get $labels "app.kubernetes.io/instance" }}
{{- $namespace := dig "metadata" "namespace" "" $deployment }}
{{- if and (eq (get $labels "app.kubernetes.io/part-of") "gpu-rightsizer") (eq (get $labels "app.kubernetes.io/component") "recommender") (not (and (eq $namespace $.Release.Namespace) (eq $release $.Release.Name))) }}
{{- $theirs := list }}
{{- $everywhere := false }}
{{- range (dig "spec" "template" "spec" "containers" list $deployment) }}
{{- range (dig "args" list .) }}
{{- if eq . "--all-namespaces" }}{{ $everywhere = true }}{{ end }}
{{- if hasPrefix "--namespace=" . }}{{ $theirs = append $theirs (trimPrefix "--namespace=" .) }}{{ end }}
{{- end }}
{{- end }}
{{- $other := printf "release %q in namespace %q (Deployment %s)" $release $namespace (dig "metadata" "name" "" $deployment) }}
{{- $fix := printf "uninstall it first (helm uninstall %s -n %s), or give both releases watch.namespaces that do not overlap" $release $namespace }}
{{- if or $everywhere (empty $theirs) }}
{{- fail (printf "watch.namespaces: %s already analyses every namespace, so a second recommender would write the same GPURecommendations; %s" $other $fix) }}
{{- else if empty $mine }}
{{- fail (printf "watch.namespaces is empty (every namespace), but %s already analyses %s, so two recommenders would write the same GPURecommendations; %s" $other (join ", " $theirs) $fix) }}
{{- else }}
{{- $both := list }}
{{- range $mine }}{{ if has . $theirs }}{{ $both = append $both . }}{{ end }}{{ end }}
{{- if $both }}
{{- fail (printf "watch.namespaces: %s already analyses %s, so two recommenders would write the same GPURecommendations there; %s" $other (join ", " $both) $fix) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Affinity of an operator pod: its own, plus (with avoidGPUNodes, unless it sets nodeAffinity itself) a
required node affinity away from GPU nodes as the GPU Operator / GPU feature discovery and Node Feature
Discovery label them. Call with (dict "ctx" $ "affinity" .Values.recommender.affinity).
*/}}
{{- define "gpurs.operatorAffinity" -}}
{{- $affinity := deepCopy (.affinity | default dict) }}
{{- if and .ctx.Values.avoidGPUNodes (not (hasKey $affinity "nodeAffinity")) }}
{{- $notGPU := list (dict "key" "nvidia.com/gpu.present" "operator" "NotIn" "values" (list "true")) (dict "key" "feature.node.kubernetes.io/pci-10de.present" "operator" "NotIn" "values" (list "true")) }}
{{- $_ := set $affinity "nodeAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (dict "nodeSelectorTerms" (list (dict "matchExpressions" $notGPU)))) }}
{{- end }}
{{- with $affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
"true" when the ServiceMonitor is rendered: serviceMonitor.enabled=true, or "auto" and the cluster
serves prometheus-operator's monitoring.coreos.com/v1 API.
*/}}
{{- define "gpurs.serviceMonitor.enabled" -}}
{{- $enabled := toString .Values.serviceMonitor.enabled }}
{{- if or (eq $enabled "true") (and (eq $enabled "auto") (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1")) }}true{{ end }}
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
- --prometheus-compression={{ .Values.prometheus.compression }}
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
