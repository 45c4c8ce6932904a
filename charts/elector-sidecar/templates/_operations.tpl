{{/*
Named templates for running the release: the metrics Service, the prometheus-operator objects, the
PodDisruptionBudget, the NetworkPolicy and commonLabels (templates/monitoring.yaml, pdb.yaml, networkpolicy.yaml).
*/}}

{{/*
elector-sidecar.metricsService: where the metrics port is published: "governing" (a StatefulSet's headless
governing Service that the chart creates carries it: no second Service for the same pods), "own" (a Service
<fullname>-metrics: a Deployment, or a StatefulSet with its own workload.serviceName), or "" (none: metrics,
metrics.service or the workload off).
*/}}
{{- define "elector-sidecar.metricsService" -}}
{{- if and .Values.metrics.enabled .Values.metrics.service.enabled .Values.workload.enabled }}
{{- if and (eq .Values.workload.kind "StatefulSet") (not .Values.workload.serviceName) }}governing{{ else }}own{{ end }}
{{- end }}
{{- end }}

{{- define "elector-sidecar.metricsServiceName" -}}
{{- if eq (include "elector-sidecar.metricsService" .) "governing" }}
{{- include "elector-sidecar.fullname" . }}
{{- else }}
{{- printf "%s-metrics" (include "elector-sidecar.fullname" . | trunc 55 | trimSuffix "-") }}
{{- end }}
{{- end }}

{{/* The label that marks the metrics Service (the ServiceMonitor selects it, not the leader Service). */}}
{{- define "elector-sidecar.metricsServiceLabel" -}}
elector-sidecar.io/metrics: "true"
{{- end }}

{{/*
elector-sidecar.labelsWith: the chart's labels plus extra ones (which may not replace the chart's own).
Call with (list $ctx $extra "metrics.serviceMonitor.labels").
*/}}
{{- define "elector-sidecar.labelsWith" -}}
{{- $ctx := index . 0 }}
{{- $own := include "elector-sidecar.labels" $ctx | fromYaml }}
{{- $extra := default (dict) (index . 1) }}
{{- $what := index . 2 }}
{{- range $k := keys $extra | sortAlpha }}
{{- if hasKey $own $k }}
{{- fail (printf "%s: the label %s is already set by the chart (or commonLabels)" $what $k) }}
{{- end }}
{{- end }}
{{- include "elector-sidecar.labels" $ctx }}
{{- with $extra }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* elector-sidecar.pdbBound: "true" when a pdb.maxUnavailable or pdb.minAvailable value is set (0 is set; "" and null are not). */}}
{{- define "elector-sidecar.pdbBound" -}}
{{- if and (not (kindIs "invalid" .)) (ne (toString .) "") }}true{{ end }}
{{- end }}

{{/*
elector-sidecar.validateOperations: fails with a clear message on impossible combinations of metrics.service,
metrics.serviceMonitor, metrics.podMonitor, metrics.prometheusRule, pdb, networkPolicy and commonLabels.
*/}}
{{- define "elector-sidecar.validateOperations" -}}
{{- $chartLabels := list "helm.sh/chart" "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/version" "app.kubernetes.io/managed-by" "elector-sidecar.io/metrics" }}
{{- range $k := keys (default (dict) .Values.commonLabels) | sortAlpha }}
{{- if has $k $chartLabels }}
{{- fail (printf "commonLabels.%s: the chart sets this label itself (helm.sh/chart, app.kubernetes.io/{name,instance,version,managed-by} and elector-sidecar.io/metrics are the chart's)" $k) }}
{{- end }}
{{- end }}
{{- $m := .Values.metrics }}
{{- if and (eq (include "elector-sidecar.metricsService" .) "governing") (ne $m.service.type "ClusterIP") }}
{{- fail (printf "metrics.service.type=%s: with workload.kind=StatefulSet the metrics port is on the chart's headless governing Service, which can only be ClusterIP; set workload.serviceName to a Service of your own to get a separate <fullname>-metrics Service of type %s" $m.service.type $m.service.type) }}
{{- end }}
{{- range $kind := list "serviceMonitor" "podMonitor" }}
{{- $mon := index $m $kind }}
{{- if $mon.enabled }}
{{- if not $m.enabled }}
{{- fail (printf "metrics.%s.enabled=true requires metrics.enabled=true: there is no metrics port to scrape" $kind) }}
{{- end }}
{{- if not $.Values.workload.enabled }}
{{- fail (printf "metrics.%s.enabled=true requires workload.enabled=true: it selects the chart's own pods (in your own chart, scrape your pods' metrics port yourself)" $kind) }}
{{- end }}
{{- if and (eq $kind "serviceMonitor") (not $m.service.enabled) }}
{{- fail "metrics.serviceMonitor.enabled=true requires metrics.service.enabled=true: the ServiceMonitor finds the pods through the metrics Service (or use metrics.podMonitor)" }}
{{- end }}
{{- $go := "^([0-9]+(ms|s|m|h))+$" }}
{{- if and (regexMatch $go (toString $mon.interval)) (regexMatch $go (toString $mon.scrapeTimeout)) }}
{{- $i := include "elector-sidecar.durationNs" (list (printf "metrics.%s.interval" $kind) $mon.interval) | int64 }}
{{- $to := include "elector-sidecar.durationNs" (list (printf "metrics.%s.scrapeTimeout" $kind) $mon.scrapeTimeout) | int64 }}
{{- if gt $to $i }}
{{- fail (printf "metrics.%s.scrapeTimeout (%s) must not be longer than metrics.%s.interval (%s): Prometheus rejects such a scrape config" $kind $mon.scrapeTimeout $kind $mon.interval) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- if and $m.serviceMonitor.enabled $m.podMonitor.enabled }}
{{- fail "metrics.serviceMonitor.enabled and metrics.podMonitor.enabled are both true: Prometheus would scrape every pod twice; enable one" }}
{{- end }}
{{- if and $m.prometheusRule.enabled (not $m.enabled) }}
{{- fail "metrics.prometheusRule.enabled=true requires metrics.enabled=true: without elector_* metrics its alerts would never fire" }}
{{- end }}
{{- $p := .Values.pdb }}
{{- if $p.create }}
{{- if not .Values.workload.enabled }}
{{- fail "pdb.create=true requires workload.enabled=true: the PodDisruptionBudget selects the chart's own pods" }}
{{- end }}
{{- if and (include "elector-sidecar.pdbBound" $p.maxUnavailable) (include "elector-sidecar.pdbBound" $p.minAvailable) }}
{{- fail (printf "pdb.maxUnavailable (%v) and pdb.minAvailable (%v) are mutually exclusive: set one (neither: maxUnavailable 1)" $p.maxUnavailable $p.minAvailable) }}
{{- end }}
{{- /* A PDB that allows no eviction blocks every node drain (the API server accepts it). */}}
{{- if include "elector-sidecar.pdbBound" $p.minAvailable }}
{{- $min := toString $p.minAvailable }}
{{- if or (eq $min "100%") (and (regexMatch "^[0-9]+$" $min) (ge (atoi $min) (int .Values.workload.replicas))) }}
{{- fail (printf "pdb.minAvailable %s with workload.replicas %d allows no eviction and blocks every node drain: set it below the replicas (or use pdb.maxUnavailable)" $min (int .Values.workload.replicas)) }}
{{- end }}
{{- end }}
{{- end }}
{{- if .Values.networkPolicy.enabled }}
{{- if not .Values.workload.enabled }}
{{- fail "networkPolicy.enabled=true requires workload.enabled=true: the NetworkPolicy selects the chart's own pods" }}
{{- end }}
{{- if and .Values.leaderService.enabled (not .Values.networkPolicy.extraIngress) }}
{{- fail "networkPolicy.enabled=true with leaderService.enabled=true: the NetworkPolicy lets in only the metrics port, so the leader Service's ports would be blocked; allow them with networkPolicy.extraIngress" }}
{{- end }}
{{- end }}
{{- end }}
