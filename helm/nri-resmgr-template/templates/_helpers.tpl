{{/*
The policy comes from the chart name, so every chart of nri-resmgr ships the very same
templates (a test keeps them identical).
*/}}
{{- define "nri-resmgr.policy" -}}
{{- trimPrefix "nri-resmgr-" .Chart.Name -}}
{{- end -}}

{{- define "nri-resmgr.kind" -}}
{{- $kinds := dict "topology-aware" "TopologyAwarePolicy" "balloons" "BalloonsPolicy" "template" "TemplatePolicy" -}}
{{- required (printf "chart %s names no known policy" .Chart.Name) (get $kinds (include "nri-resmgr.policy" .)) -}}
{{- end -}}

{{- define "nri-resmgr.plural" -}}
{{- $kind := lower (include "nri-resmgr.kind" .) -}}
{{- printf "%sies" (trimSuffix "y" $kind) -}}
{{- end -}}

{{- define "nri-resmgr.fullname" -}}
{{- default .Chart.Name .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "nri-resmgr.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nri-resmgr.fullname" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "nri-resmgr.labels" -}}
{{ include "nri-resmgr.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/*
"true" exactly when the daemon turns DRA on (nri_resmgr/config/draswitch.py): config.dra.enabled
true, or unset while the config asks for devices (dra.cpuDeviceMode grouped, a balloon type
with dra.publish true); false, and unset without such a key, are off. Every DRA-only piece of
a template sits in a flat block opened by `if include "nri-resmgr.draEnabled" .`, so the
chart renders without DRA exactly as a chart that never had it.
*/}}
{{- define "nri-resmgr.draEnabled" -}}
{{- $config := .Values.config | default dict -}}
{{- $dra := $config.dra | default dict -}}
{{- if kindIs "bool" $dra.enabled -}}
{{- if $dra.enabled -}}true{{- end -}}
{{- else -}}
{{- $asks := eq (toString $dra.cpuDeviceMode) "grouped" -}}
{{- range ($config.balloonTypes | default list) -}}
{{- $typeDra := .dra | default dict -}}
{{- if and (kindIs "bool" $typeDra.publish) $typeDra.publish -}}{{- $asks = true -}}{{- end -}}
{{- end -}}
{{- if $asks -}}true{{- end -}}
{{- end -}}
{{- end -}}

{{- define "nri-resmgr.image" -}}
{{- printf "%s:%s" .Values.image.name (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/*
The port of config.instrumentation.httpEndpoint (":8891" -> 8891), as nri-plugins' charts
take it; empty when there is no endpoint (no HTTP server, so no port, probes or annotations).
*/}}
{{- define "nri-resmgr.httpPort" -}}
{{- $i := .Values.config.instrumentation | default dict -}}
{{- $endpoint := $i.httpEndpoint | default "" -}}
{{- if $endpoint -}}{{- regexReplaceAll "^.*:([0-9]+)$" $endpoint "${1}" -}}{{- end -}}
{{- end -}}

{{/*
"true" unless config.agent.nodeResourceTopology is false (its default is on, as upstream).
*/}}
{{- define "nri-resmgr.nrtEnabled" -}}
{{- $agent := .Values.config.agent | default dict -}}
{{- if not (and (kindIs "bool" $agent.nodeResourceTopology) (not $agent.nodeResourceTopology)) -}}true{{- end -}}
{{- end -}}

{{/*
Which host cpufreq files the configured CPU classes write (balloons applies
control.cpu.classes; the other policies do not): "cpufreq: true" when a class sets
minFreq, maxFreq or freqGovernor, "uncore: true" when one sets uncoreMinFreq or
uncoreMaxFreq. A YAML map, read with fromYaml; empty without classes.
*/}}
{{- define "nri-resmgr.cpuClassFiles" -}}
{{- $files := dict -}}
{{- if eq (include "nri-resmgr.policy" .) "balloons" -}}
{{- $control := .Values.config.control | default dict -}}
{{- $cpu := $control.cpu | default dict -}}
{{- range $name, $class := ($cpu.classes | default dict) -}}
{{- if or $class.minFreq $class.maxFreq $class.freqGovernor -}}
{{- $_ := set $files "cpufreq" true -}}
{{- end -}}
{{- if or $class.uncoreMinFreq $class.uncoreMaxFreq -}}
{{- $_ := set $files "uncore" true -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toYaml $files -}}
{{- end -}}
