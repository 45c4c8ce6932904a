{{/*
Named templates of the elector-sidecar chart. Every template takes this chart's context: in this chart
that is `.`; in a parent chart that lists elector-sidecar as a dependency it is
`(index .Subcharts "elector-sidecar")` (or the dependency's alias), which carries the subchart's own
.Values, .Release and .Chart. See README.md, "Use from your own chart".
*/}}

{{- define "elector-sidecar.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "elector-sidecar.fullname" -}}
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

{{- define "elector-sidecar.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "elector-sidecar.selectorLabels" -}}
app.kubernetes.io/name: {{ include "elector-sidecar.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "elector-sidecar.labels" -}}
helm.sh/chart: {{ include "elector-sidecar.chart" . }}
{{ include "elector-sidecar.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The Lease the sidecars compete for (and the Role and the guard are limited to). */}}
{{- define "elector-sidecar.leaseName" -}}
{{- default (include "elector-sidecar.fullname" .) .Values.election.leaseName }}
{{- end }}

{{/*
elector-sidecar.leaseLabels: the Lease's labels for --lease-labels, "key=value,..." sorted by key: the
release's app.kubernetes.io/name and app.kubernetes.io/instance, then election.leaseLabels (which win).
*/}}
{{- define "elector-sidecar.leaseLabels" -}}
{{- $labels := merge (deepCopy (default (dict) .Values.election.leaseLabels)) (include "elector-sidecar.selectorLabels" . | fromYaml) }}
{{- $pairs := list }}
{{- range $k := keys $labels | sortAlpha }}
{{- $pairs = append $pairs (printf "%s=%s" $k (toString (index $labels $k))) }}
{{- end }}
{{- join "," $pairs }}
{{- end }}

{{- define "elector-sidecar.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "elector-sidecar.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* "true" when the chart runs elector-demo, whose fenced store is a ConfigMap of the chart; else "". */}}
{{- define "elector-sidecar.demoStore" -}}
{{- if and .Values.demo.enabled .Values.workload.enabled (eq (default "elector-demo" .Values.demo.app) "elector-demo") }}true{{ end }}
{{- end }}

{{- define "elector-sidecar.demoStoreName" -}}
{{- printf "%s-demo-store" (include "elector-sidecar.fullname" . | trunc 52 | trimSuffix "-") }}
{{- end }}

{{- define "elector-sidecar.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The demo image (demo.image): /elector-demo, /go-worker and the helm test's /elector-chart-test. */}}
{{- define "elector-sidecar.demoImage" -}}
{{- if .Values.demo.image.digest }}
{{- printf "%s@%s" .Values.demo.image.repository .Values.demo.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.demo.image.repository (default .Chart.AppVersion .Values.demo.image.tag) }}
{{- end }}
{{- end }}

{{/* The app's image (app.image): repository@digest when a digest is set, else repository:tag. */}}
{{- define "elector-sidecar.appImage" -}}
{{- if .Values.app.image.digest }}
{{- printf "%s@%s" .Values.app.image.repository .Values.app.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.app.image.repository .Values.app.image.tag }}
{{- end }}
{{- end }}

{{/* The local API as the app sees it. */}}
{{- define "elector-sidecar.url" -}}
{{- printf "http://127.0.0.1:%d" (int .Values.sidecar.httpPort) }}
{{- end }}

{{/*
elector-sidecar.durationNs: a duration in nanoseconds (as a string), parsed exactly as the sidecar parses its
flags (Go's time.ParseDuration): "0", or a sequence of decimal numbers with a unit ns, us (or µs), ms, s, m or h,
with an optional sign: 500ms, 15s, 1.5s, 1m30s. Fails with a message naming the value otherwise, or when it is
longer than about 292 years (int64 nanoseconds). Fractions are exact to the nanosecond (to 13 decimal places).
Call with (list "election.leaseDuration" "15s").
*/}}
{{- define "elector-sidecar.durationNs" -}}
{{- $key := index . 0 }}
{{- $d := toString (index . 1) }}
{{- $max := 9223372036854775807 }}
{{- $bad := printf "%s: %q is not a duration: use a number with a unit, e.g. 15s or 500ms" $key $d }}
{{- if not (regexMatch "^[-+]?(0|(([0-9]+(\\.[0-9]*)?|\\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$" $d) }}
{{- fail $bad }}
{{- end }}
{{- /* unit: [ns per unit as c x 10^e, c, 10^(13-e)]: a 13-digit fraction F gives floor(F x c / 10^(13-e)) ns */}}
{{- $units := dict "ns" (list 1 1 10000000000000) "us" (list 1000 1 10000000000) "µs" (list 1000 1 10000000000) "μs" (list 1000 1 10000000000) "ms" (list 1000000 1 10000000) "s" (list 1000000000 1 10000) "m" (list 60000000000 6 1000) "h" (list 3600000000000 36 100) }}
{{- $total := 0 | int64 }}
{{- range regexFindAll "([0-9]+(\\.[0-9]*)?|\\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)" $d -1 }}
{{- $unit := regexFind "[a-zµμ]+$" . }}
{{- $u := index $units $unit }}
{{- $num := trimSuffix $unit . }}
{{- $int := regexReplaceAll "^0+" (regexFind "^[0-9]*" $num) "" }}
{{- $frac := trimPrefix "." (trimPrefix (regexFind "^[0-9]*" $num) $num) | trunc 13 }}
{{- if or (gt (len $int) 19) (and (eq (len $int) 19) (gt $int "9223372036854775807")) }}
{{- fail $bad }}
{{- end }}
{{- $i := default "0" $int | int64 }}
{{- if gt $i (div $max (index $u 0)) }}
{{- fail $bad }}
{{- end }}
{{- $v := mul $i (index $u 0) }}
{{- $f := regexReplaceAll "^0+" (printf "%s%s" $frac (repeat (sub 13 (len $frac) | int) "0")) "" | default "0" | int64 }}
{{- $fns := div (mul $f (index $u 1)) (index $u 2) }}
{{- if gt $v (sub $max $fns) }}
{{- fail $bad }}
{{- end }}
{{- $v = add $v $fns }}
{{- if gt $total (sub $max $v) }}
{{- fail $bad }}
{{- end }}
{{- $total = add $total $v }}
{{- end }}
{{- if hasPrefix "-" $d }}
{{- $total = sub 0 $total }}
{{- end }}
{{- $total }}
{{- end }}

{{/*
elector-sidecar.validate: fails with a clear message on impossible combinations. Included by every
template that renders something, so parent charts that use the named templates get the same checks.
*/}}
{{- define "elector-sidecar.validate" -}}
{{- /*
The timing rules are the sidecar's own (pkg/election Config.Validate), checked in the same order, so a
release renders exactly when its sidecars start; test/chart/validation_test.go runs both on a table.
*/}}
{{- $e := .Values.election }}
{{- $lease := include "elector-sidecar.durationNs" (list "election.leaseDuration" $e.leaseDuration) | int64 }}
{{- $renew := include "elector-sidecar.durationNs" (list "election.renewDeadline" $e.renewDeadline) | int64 }}
{{- $retry := include "elector-sidecar.durationNs" (list "election.retryPeriod" $e.retryPeriod) | int64 }}
{{- $skew := include "elector-sidecar.durationNs" (list "election.clockSkewMargin" $e.clockSkewMargin) | int64 }}
{{- if le $retry 0 }}
{{- fail (printf "election.retryPeriod (%v): must be positive" $e.retryPeriod) }}
{{- end }}
{{- if lt $lease 1000000000 }}
{{- fail (printf "election.leaseDuration (%v): must be at least 1s (the Lease stores whole seconds)" $e.leaseDuration) }}
{{- end }}
{{- if gt $lease 2147483647000000000 }}
{{- fail (printf "election.leaseDuration (%v): must be at most 596523h14m7s (the Lease stores int32 seconds)" $e.leaseDuration) }}
{{- end }}
{{- if le $lease $renew }}
{{- fail (printf "election.leaseDuration (%v): must be greater than election.renewDeadline (%v): the leader must give up before others may take over" $e.leaseDuration $e.renewDeadline) }}
{{- end }}
{{- if le $renew 0 }}
{{- fail (printf "election.renewDeadline (%v): must be positive" $e.renewDeadline) }}
{{- end }}
{{- /* renewDeadline > 1.2 x retryPeriod, exactly: renew - retry > floor(retry / 5), in whole nanoseconds */}}
{{- if le (sub $renew $retry) (div $retry 5) }}
{{- fail (printf "election.renewDeadline (%v): must be greater than 1.2 x election.retryPeriod (%v)" $e.renewDeadline $e.retryPeriod) }}
{{- end }}
{{- if lt $skew 0 }}
{{- fail (printf "election.clockSkewMargin (%v): must not be negative" $e.clockSkewMargin) }}
{{- end }}
{{- if ge $skew (sub $lease $retry) }}
{{- fail (printf "election.clockSkewMargin (%v): must be less than election.leaseDuration minus election.retryPeriod (%v - %v), or the token would expire before the next renew" $e.clockSkewMargin $e.leaseDuration $e.retryPeriod) }}
{{- end }}
{{- $lname := include "elector-sidecar.leaseName" . }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$" $lname) }}
{{- fail (printf "election.leaseName %q is not a valid object name (lower case letters, digits, '-' and '.')" $lname) }}
{{- end }}
{{- if not (has (default "elector-demo" .Values.demo.app) (list "elector-demo" "go-worker")) }}
{{- fail (printf "demo.app %q: must be elector-demo or go-worker" .Values.demo.app) }}
{{- end }}
{{- if and .Values.demo.enabled (eq .Values.demo.app "go-worker") (not .Values.demo.postgresURL) }}
{{- fail "demo.postgresURL is required with demo.app=go-worker: the PostgreSQL URL it writes to, e.g. postgres://user@host:5432/db (a password from a Secret: PGPASSWORD in app.env)" }}
{{- end }}
{{- $probeMode := toString .Values.sidecar.probes.mode }}
{{- if eq $probeMode "http" }}
{{- fail "sidecar.probes.mode=http was removed: it bound the local API (/token, POST /release) to 0.0.0.0, so any pod could read the token and release the Lease. Use sidecar.probes.mode=httpGet (the default: the kubelet probes /readyz and /healthz on the diagnostics port, metrics.port, which serves nothing else), or exec" }}
{{- end }}
{{- if not (has $probeMode (list "httpGet" "exec" "none")) }}
{{- fail (printf "sidecar.probes.mode %q: must be httpGet, exec or none" $probeMode) }}
{{- end }}
{{- if and (eq $probeMode "httpGet") (not .Values.metrics.enabled) }}
{{- fail "sidecar.probes.mode=httpGet probes the diagnostics port (metrics.port), which metrics.enabled=false turns off: set metrics.enabled=true, or sidecar.probes.mode=exec (or none)" }}
{{- end }}
{{- if and .Values.metrics.enabled (eq (int .Values.metrics.port) (int .Values.sidecar.httpPort)) }}
{{- fail (printf "metrics.port and sidecar.httpPort are both %d: the diagnostics listener needs its own port" (int .Values.metrics.port)) }}
{{- end }}
{{- if .Values.appHealth.enabled }}
{{- $h := .Values.appHealth }}
{{- $period := include "elector-sidecar.durationNs" (list "appHealth.period" $h.period) | int64 }}
{{- $timeout := include "elector-sidecar.durationNs" (list "appHealth.timeout" $h.timeout) | int64 }}
{{- if or (eq $timeout 0) (ge $timeout $period) }}
{{- fail (printf "appHealth.timeout (%s) must be greater than 0 and shorter than appHealth.period (%s)" (toString $h.timeout) (toString $h.period)) }}
{{- end }}
{{- if or (lt (int $h.failureThreshold) 1) (lt (int $h.successThreshold) 1) }}
{{- fail (printf "appHealth.failureThreshold (%v) and appHealth.successThreshold (%v) must be at least 1" $h.failureThreshold $h.successThreshold) }}
{{- end }}
{{- if not (hasPrefix "/" (toString $h.path)) }}
{{- fail (printf "appHealth.path %q: must start with /" (toString $h.path)) }}
{{- end }}
{{- $_ := include "elector-sidecar.appHealthPort" . }}
{{- end }}
{{- if and .Values.leaderService.enabled (not .Values.leaderLabel.enabled) }}
{{- fail "leaderService.enabled=true requires leaderLabel.enabled=true: the Service selects the pod that carries the leader label" }}
{{- end }}
{{- if and .Values.sidecar.native (semverCompare "<1.29.0-0" .Capabilities.KubeVersion.Version) }}
{{- fail (printf "sidecar.native=true needs Kubernetes >= 1.29 (native sidecars), this cluster is %s: set sidecar.native=false" .Capabilities.KubeVersion.Version) }}
{{- end }}
{{- include "elector-sidecar.validateShards" . }}
{{- end }}

{{/*
elector-sidecar.appHealthPort: the port the sidecar probes with appHealth.enabled: appHealth.port, else the
demo's health port (with the demo in this chart's workload), else the first of app.ports.
*/}}
{{- define "elector-sidecar.appHealthPort" -}}
{{- $port := int .Values.appHealth.port }}
{{- if and (eq $port 0) .Values.workload.enabled .Values.demo.enabled }}
{{- $port = int .Values.demo.healthPort }}
{{- end }}
{{- if and (eq $port 0) .Values.workload.enabled .Values.app.ports }}
{{- $port = int (index .Values.app.ports 0).containerPort }}
{{- end }}
{{- if eq $port 0 }}
{{- fail "appHealth.port is required with appHealth.enabled: the app's port on 127.0.0.1 (no demo and no app.ports to take it from)" }}
{{- end }}
{{- $port }}
{{- end }}

{{/*
elector-sidecar.expectedCandidates: --expected-candidates, "" when unknown: election.expectedCandidates,
or else workload.replicas when the chart renders the workload.
*/}}
{{- define "elector-sidecar.expectedCandidates" -}}
{{- $n := int64 (.Values.election.expectedCandidates | default 0) -}}
{{- if and (eq $n 0) .Values.workload.enabled -}}
{{- $n = int64 .Values.workload.replicas -}}
{{- end -}}
{{- if gt $n 0 }}{{ $n }}{{ end -}}
{{- end }}

{{/* The sidecar's environment: Downward API identity plus ELECTOR_* settings. */}}
{{- define "elector-sidecar.env" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: POD_UID
  valueFrom:
    fieldRef:
      fieldPath: metadata.uid
- name: ELECTOR_LEASE_NAME
  value: {{ include "elector-sidecar.leaseName" . | quote }}
{{- with include "elector-sidecar.shards" . | int64 }}
- name: ELECTOR_SHARDS
  value: {{ . | toString | quote }}
{{- end }}
- name: ELECTOR_LEASE_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: ELECTOR_LEASE_DURATION
  value: {{ .Values.election.leaseDuration | quote }}
- name: ELECTOR_RENEW_DEADLINE
  value: {{ .Values.election.renewDeadline | quote }}
- name: ELECTOR_RETRY_PERIOD
  value: {{ .Values.election.retryPeriod | quote }}
- name: ELECTOR_CLOCK_SKEW_MARGIN
  value: {{ .Values.election.clockSkewMargin | quote }}
- name: ELECTOR_HTTP_ADDRESS
  value: {{ printf "127.0.0.1:%d" (int .Values.sidecar.httpPort) | quote }}
{{- if .Values.metrics.enabled }}
- name: ELECTOR_HTTP_ENDPOINT
  value: {{ printf ":%d" (int .Values.metrics.port) | quote }}
{{- end }}
- name: ELECTOR_LOG_FORMAT
  value: {{ .Values.sidecar.logFormat | quote }}
- name: ELECTOR_LOG_LEVEL
  value: {{ .Values.sidecar.logLevel | quote }}
- name: ELECTOR_LEASE_LABELS
  value: {{ include "elector-sidecar.leaseLabels" . | quote }}
- name: ELECTOR_KUBE_API_QPS
  value: {{ .Values.sidecar.kubeAPIQPS | toString | quote }}
- name: ELECTOR_KUBE_API_BURST
  value: {{ int64 .Values.sidecar.kubeAPIBurst | toString | quote }}
- name: ELECTOR_SHUTDOWN_HANDOFF
  value: {{ .Values.election.shutdownHandoff | default (ternary "immediate" "after-validity" .Values.sidecar.native) | quote }}
{{- with include "elector-sidecar.expectedCandidates" . }}
- name: ELECTOR_EXPECTED_CANDIDATES
  value: {{ . | quote }}
{{- end }}
{{- if .Values.appHealth.enabled }}
- name: ELECTOR_APP_HEALTH_URL
  value: {{ printf "http://127.0.0.1:%s%s" (include "elector-sidecar.appHealthPort" .) .Values.appHealth.path | quote }}
- name: ELECTOR_APP_HEALTH_PERIOD
  value: {{ .Values.appHealth.period | quote }}
- name: ELECTOR_APP_HEALTH_TIMEOUT
  value: {{ .Values.appHealth.timeout | quote }}
- name: ELECTOR_APP_HEALTH_FAILURE_THRESHOLD
  value: {{ .Values.appHealth.failureThreshold | quote }}
- name: ELECTOR_APP_HEALTH_SUCCESS_THRESHOLD
  value: {{ .Values.appHealth.successThreshold | quote }}
{{- end }}
{{- if .Values.leaderLabel.enabled }}
- name: ELECTOR_LEADER_LABEL
  value: {{ .Values.leaderLabel.key | quote }}
{{- /* A new leader strips the label only from this release's pods: two releases in one namespace never fight. */}}
{{- $podSelector := list }}
{{- range $k, $v := include "elector-sidecar.selectorLabels" . | fromYaml }}
{{- $podSelector = append $podSelector (printf "%s=%s" $k $v) }}
{{- end }}
- name: ELECTOR_LEADER_LABEL_SELECTOR
  value: {{ join "," $podSelector | quote }}
{{- end }}
{{- with .Values.sidecar.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* elector-sidecar.probe: the handler of one probe. Call with (list $ctx "/readyz" $timings). */}}
{{- define "elector-sidecar.probe" -}}
{{- $ctx := index . 0 }}
{{- $path := index . 1 }}
{{- $t := index . 2 }}
{{- if eq $ctx.Values.sidecar.probes.mode "httpGet" }}
httpGet:
  path: {{ $path }}
  port: metrics
{{- else }}
exec:
  command:
    {{- range $ctx.Values.sidecar.probes.execCommand }}
    - {{ . | quote }}
    {{- end }}
    - {{ printf "--http-address=127.0.0.1:%d" (int $ctx.Values.sidecar.httpPort) | quote }}
    - {{ $path | quote }}
{{- end }}
{{ toYaml $t }}
{{- end }}

{{/*
elector-sidecar.containerSpec: the sidecar container (a list item), without restartPolicy.
*/}}
{{- define "elector-sidecar.containerSpec" -}}
{{- include "elector-sidecar.validate" . -}}
- name: {{ .Values.sidecar.name }}
  image: {{ include "elector-sidecar.image" . | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  {{- with .Values.sidecar.extraArgs }}
  args:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  env:
    {{- include "elector-sidecar.env" . | nindent 4 }}
  {{- /* The local API (sidecar.httpPort) listens on 127.0.0.1 only: no container port for it. */}}
  {{- if .Values.metrics.enabled }}
  ports:
    - name: metrics
      containerPort: {{ .Values.metrics.port }}
      protocol: TCP
  {{- end }}
  {{- if ne .Values.sidecar.probes.mode "none" }}
  startupProbe:
    {{- include "elector-sidecar.probe" (list . "/readyz" .Values.sidecar.probes.startup) | trim | nindent 4 }}
  livenessProbe:
    {{- include "elector-sidecar.probe" (list . "/healthz" .Values.sidecar.probes.liveness) | trim | nindent 4 }}
  readinessProbe:
    {{- include "elector-sidecar.probe" (list . "/readyz" .Values.sidecar.probes.readiness) | trim | nindent 4 }}
  {{- end }}
  volumeMounts:
    {{- include "elector-sidecar.tokenVolumeMount" . | nindent 4 }}
  {{- with .Values.sidecar.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.sidecar.securityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}

{{/*
elector-sidecar.tokenVolume: the pod volume with the ServiceAccount token, a list item for `volumes:`.
The standard kube-api-access-* layout (a projected token, kube-root-ca.crt's ca.crt and the namespace),
mounted by the sidecar only (elector-sidecar.tokenVolumeMount): the pod sets
automountServiceAccountToken: false, so the app containers get no token. Every pod that includes
elector-sidecar.container or elector-sidecar.initContainer needs this volume.
  automountServiceAccountToken: false
  volumes:
    {{- include "elector-sidecar.tokenVolume" (index .Subcharts "elector-sidecar") | nindent 4 }}
*/}}
{{- define "elector-sidecar.tokenVolume" -}}
- name: {{ include "elector-sidecar.tokenVolumeName" . }}
  projected:
    defaultMode: 420
    sources:
      - serviceAccountToken:
          expirationSeconds: 3607
          path: token
      - configMap:
          name: kube-root-ca.crt
          items:
            - key: ca.crt
              path: ca.crt
      - downwardAPI:
          items:
            - path: namespace
              fieldRef:
                apiVersion: v1
                fieldPath: metadata.namespace
{{- end }}

{{- define "elector-sidecar.tokenVolumeName" -}}
kube-api-access-elector
{{- end }}

{{/*
elector-sidecar.tokenVolumeMount: the token volume where client-go's in-cluster config looks for it, a list
item for a container's `volumeMounts:` (the sidecar's own, and the demo app's with its ConfigMap store).
*/}}
{{- define "elector-sidecar.tokenVolumeMount" -}}
- name: {{ include "elector-sidecar.tokenVolumeName" . }}
  mountPath: /var/run/secrets/kubernetes.io/serviceaccount
  readOnly: true
{{- end }}

{{/*
elector-sidecar.container: the sidecar as a plain container, a list item for `containers:`.
It mounts the pod volume of elector-sidecar.tokenVolume.
  containers:
    {{- include "elector-sidecar.container" (index .Subcharts "elector-sidecar") | nindent 4 }}
*/}}
{{- define "elector-sidecar.container" -}}
{{- include "elector-sidecar.containerSpec" . }}
{{- end }}

{{/*
elector-sidecar.initContainer: the sidecar as a native sidecar (restartPolicy: Always), a list item
for `initContainers:` (Kubernetes >= 1.29). It starts before, and stops after, the app containers.
It mounts the pod volume of elector-sidecar.tokenVolume.
  initContainers:
    {{- include "elector-sidecar.initContainer" (index .Subcharts "elector-sidecar") | nindent 4 }}
*/}}
{{- define "elector-sidecar.initContainer" -}}
{{- if semverCompare "<1.29.0-0" .Capabilities.KubeVersion.Version }}
{{- fail (printf "sidecar.native=true needs Kubernetes >= 1.29 (native sidecars: an initContainer with restartPolicy Always); this cluster is %s: set sidecar.native=false (a plain container)" .Capabilities.KubeVersion.Version) }}
{{- end }}
{{- include "elector-sidecar.containerSpec" . }}
  restartPolicy: Always
{{- end }}

{{/*
elector-sidecar.rbac: ServiceAccount (if serviceAccount.create), Role and RoleBinding, as YAML documents.
*/}}
{{- define "elector-sidecar.rbac" -}}
{{- include "elector-sidecar.validate" . -}}
{{- $fullname := include "elector-sidecar.fullname" . }}
{{- if .Values.serviceAccount.create }}
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ include "elector-sidecar.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "elector-sidecar.labels" . | nindent 4 }}
  {{- with .Values.serviceAccount.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- if .Values.rbac.create }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $fullname }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "elector-sidecar.labels" . | nindent 4 }}
rules:
  {{- if gt (include "elector-sidecar.shards" . | int64) 0 }}
  {{- include "elector-sidecar.shardRoleRules" . | nindent 2 }}
  {{- else }}
  # The sidecar reads, watches (with a metadata.name field selector) and updates only its own Lease, and
  # patches it to announce itself as a candidate for the direct handoff (one annotation of its own).
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    resourceNames: [{{ include "elector-sidecar.leaseName" . | quote }}]
    verbs: ["get", "list", "watch", "update", "patch"]
  # The first candidate creates it; RBAC cannot limit create by name (the name is in the body).
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["create"]
  {{- end }}
  # Leadership change events on the Lease (core/v1; each is created once, never patched: pkg/kubeclient's recorder).
  - apiGroups: [""]
    resources: ["events"]
    verbs: ["create"]
  {{- if include "elector-sidecar.demoStore" . }}
  # The demo app's fenced store: a ConfigMap the chart creates (templates/demostore.yaml) and the app
  # updates with compare-and-swap. No create: the app must not recreate its fence state if it is deleted.
  - apiGroups: [""]
    resources: ["configmaps"]
    resourceNames: [{{ include "elector-sidecar.demoStoreName" . | quote }}]
    verbs: ["get", "update"]
  {{- end }}
  {{- if .Values.leaderLabel.enabled }}
  # Leader-only routing: the leader labels its own pod and removes the label from former leaders' pods
  # (found with a label selector). RBAC cannot limit this to the release's pods: it is every pod of the namespace.
  - apiGroups: [""]
    resources: ["pods"]
    verbs: ["get", "list", "patch"]
  {{- end }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $fullname }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "elector-sidecar.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $fullname }}
subjects:
  - kind: ServiceAccount
    name: {{ include "elector-sidecar.serviceAccountName" . }}
    namespace: {{ .Release.Namespace }}
{{- end }}
{{- end }}

{{/*
elector-sidecar.leaseGuard: ValidatingAdmissionPolicy + binding protecting the Lease.

The binding matches every Lease in the release namespace and the policy picks this release's Lease by
name in a CEL match condition, instead of listing it in resourceNames: a DeleteCollection
(`kubectl delete leases --all`) reaches admission once per object but with an empty request name, so a
resourceNames rule would not match it and the guard could be bypassed.

Namespace deletion: the namespace controller deletes the namespace's Leases (DeleteCollection, or one
by one), each going through admission as a DELETE; those are allowed because the namespace has a
deletionTimestamp (namespaceObject), and the controller's user is also exempt (leaseGuard.exemptUsers).

With election.shards the guard protects the shard set instead (elector-sidecar.shardSetGuard, _shards.tpl).
*/}}
{{- define "elector-sidecar.leaseGuard" -}}
{{- include "elector-sidecar.validate" . -}}
{{- if semverCompare "<1.30.0-0" .Capabilities.KubeVersion.Version }}
{{- fail (printf "leaseGuard.enabled=true needs Kubernetes >= 1.30 (admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy), this cluster is %s: set leaseGuard.enabled=false" .Capabilities.KubeVersion.Version) }}
{{- end }}
{{- if gt (include "elector-sidecar.shards" . | int64) 0 }}
{{- include "elector-sidecar.shardSetGuard" . }}
{{- else }}
{{- $name := printf "%s.%s.lease-guard.elector-sidecar" (include "elector-sidecar.fullname" .) .Release.Namespace }}
{{- $lease := include "elector-sidecar.leaseName" . }}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {{ $name }}
  labels:
    {{- include "elector-sidecar.labels" . | nindent 4 }}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: ["coordination.k8s.io"]
        apiVersions: ["*"]
        resources: ["leases"]
        operations: ["UPDATE", "DELETE"]
  matchConditions:
    - name: guarded-lease
      expression: {{ printf "(request.operation == 'DELETE' ? oldObject : object).metadata.name == '%s'" $lease | quote }}
  variables:
    - name: namespaceTerminating
      expression: "namespaceObject != null && has(namespaceObject.metadata.deletionTimestamp)"
    - name: exemptUser
      expression: {{ printf "request.userInfo.username in %s" (toJson .Values.leaseGuard.exemptUsers | replace "\"" "'") | quote }}
  validations:
    - expression: "request.operation != 'DELETE' || variables.namespaceTerminating || variables.exemptUser"
      messageExpression: {{ printf "'lease ' + request.namespace + '/%s is guarded by elector-sidecar: deleting it resets spec.leaseTransitions (the fencing token) to 0, so stale leaders could write again. Delete the namespace, or remove ValidatingAdmissionPolicyBinding %s first.'" $lease $name | quote }}
      reason: Forbidden
    - expression: "request.operation != 'UPDATE' || !has(oldObject.spec.leaseTransitions) || (has(object.spec.leaseTransitions) && object.spec.leaseTransitions >= oldObject.spec.leaseTransitions) || variables.exemptUser"
      messageExpression: {{ printf "'lease ' + request.namespace + '/%s is guarded by elector-sidecar: spec.leaseTransitions (the fencing token) must not decrease (from ' + string(oldObject.spec.leaseTransitions) + ' to ' + (has(object.spec.leaseTransitions) ? string(object.spec.leaseTransitions) : 'unset') + ')'" $lease | quote }}
      reason: Forbidden
    - expression: "request.operation != 'UPDATE' || !has(object.spec.leaseTransitions) || object.spec.leaseTransitions - (has(oldObject.spec.leaseTransitions) ? oldObject.spec.leaseTransitions : 0) <= 10000 || variables.exemptUser"
      messageExpression: {{ printf "'lease ' + request.namespace + '/%s is guarded by elector-sidecar: spec.leaseTransitions (the fencing token) may rise by at most 10000 in one write (from ' + (has(oldObject.spec.leaseTransitions) ? string(oldObject.spec.leaseTransitions) : 'unset') + ' to ' + string(object.spec.leaseTransitions) + '): tokens end at 2147483647'" $lease | quote }}
      reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {{ $name }}
  labels:
    {{- include "elector-sidecar.labels" . | nindent 4 }}
spec:
  policyName: {{ $name }}
  validationActions: ["Deny"]
  matchResources:
    namespaceSelector:
      matchLabels:
        kubernetes.io/metadata.name: {{ .Release.Namespace }}
{{- end }}
{{- end }}

{{/*
elector-sidecar.leaderLabelGuard: ValidatingAdmissionPolicy + binding that fence the pods permission of the
leader label (leaderLabel.enabled): RBAC grants the sidecar's ServiceAccount patch on every pod of the
namespace and cannot limit it to one label, so this policy lets that ServiceAccount (matched by user name)
UPDATE only this release's pods (old labels carry the release's selector labels) and change nothing on them
but the label leaderLabel.key, set to "true" or removed. Every other field the ServiceAccount could change
with a patch is compared with the old object: the other labels, annotations, finalizers, owner references,
generateName and the whole spec (the status is not written by a pod update; resourceVersion, generation and
managedFields change on every write and are not compared). RBAC gives the ServiceAccount no create or delete
of pods and no pod subresources, so only UPDATE is matched.
*/}}
{{- define "elector-sidecar.leaderLabelGuard" -}}
{{- include "elector-sidecar.validate" . -}}
{{- if semverCompare "<1.30.0-0" .Capabilities.KubeVersion.Version }}
{{- fail (printf "leaderLabel.guard.enabled=true needs Kubernetes >= 1.30 (admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy), this cluster is %s: set leaderLabel.guard.enabled=false" .Capabilities.KubeVersion.Version) }}
{{- end }}
{{- $name := printf "%s.%s.leader-label-guard.elector-sidecar" (include "elector-sidecar.fullname" .) .Release.Namespace }}
{{- $sa := printf "%s:%s" .Release.Namespace (include "elector-sidecar.serviceAccountName" .) }}
{{- $key := .Values.leaderLabel.key }}
{{- $selector := include "elector-sidecar.selectorLabels" . | fromYaml }}
{{- $isRelease := list }}
{{- $selectorText := list }}
{{- range $k := keys $selector | sortAlpha }}
{{- $isRelease = append $isRelease (printf "'%s' in variables.oldLabels && variables.oldLabels['%s'] == '%s'" $k $k (index $selector $k)) }}
{{- $selectorText = append $selectorText (printf "%s=%s" $k (index $selector $k)) }}
{{- end }}
{{- $same := list }}
{{- range $f := list "annotations" "finalizers" "ownerReferences" "generateName" }}
{{- $same = append $same (printf "has(object.metadata.%s) == has(oldObject.metadata.%s) && (!has(object.metadata.%s) || object.metadata.%s == oldObject.metadata.%s)" $f $f $f $f $f) }}
{{- end }}
{{- $prefix := printf "elector-sidecar leader label guard (ValidatingAdmissionPolicy %s): ServiceAccount %s may change only the label %s, only on the pods of release %s; pod ' + request.namespace + '/' + request.name + '" $name (replace ":" "/" $sa) $key .Release.Name }}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {{ $name }}
  labels:
    {{- include "elector-sidecar.labels" . | nindent 4 }}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: ["*"]
        resources: ["pods"]
        operations: ["UPDATE"]
  matchConditions:
    - name: sidecar-service-account
      expression: {{ printf "request.userInfo.username == 'system:serviceaccount:%s'" $sa | quote }}
  variables:
    - name: oldLabels
      expression: "has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}"
    - name: newLabels
      expression: "has(object.metadata.labels) ? object.metadata.labels : {}"
  validations:
    - expression: {{ join " && " $isRelease | quote }}
      messageExpression: {{ printf "'%s is not one of them (it lacks %s)'" $prefix (join "," $selectorText) | quote }}
      reason: Forbidden
    - expression: {{ printf "variables.newLabels.all(k, k == '%s' ? variables.newLabels[k] == '%s' : (k in variables.oldLabels && variables.oldLabels[k] == variables.newLabels[k])) && variables.oldLabels.all(k, k == '%s' || k in variables.newLabels)" $key "true" $key | quote }}
      messageExpression: {{ printf "'%s: its other labels must not change, and %s may only be set to \"true\" or removed'" $prefix $key | quote }}
      reason: Forbidden
    - expression: {{ join " && " $same | quote }}
      messageExpression: {{ printf "'%s: its annotations, finalizers, owner references and generateName must not change'" $prefix | quote }}
      reason: Forbidden
    - expression: "object.spec == oldObject.spec"
      messageExpression: {{ printf "'%s: its spec must not change'" $prefix | quote }}
      reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {{ $name }}
  labels:
    {{- include "elector-sidecar.labels" . | nindent 4 }}
spec:
  policyName: {{ $name }}
  validationActions: ["Deny"]
  matchResources:
    namespaceSelector:
      matchLabels:
        kubernetes.io/metadata.name: {{ .Release.Namespace }}
{{- end }}
