{{/*
Shard mode (election.shards > 0, ELECTOR_SHARDS; README "Shards"): the Lease name is the name of a set of
Leases, pkg/shards' contract:
  <name>-0 … <name>-(N-1)      one Lease per shard: holderIdentity the member that owns it, leaseTransitions
                               its fencing token (+1 on every move); labels elector-sidecar.io/shard-set=<name>,
                               elector-sidecar.io/shard-role=shard, elector-sidecar.io/shard-index=<i>
  <name>-member-<pod name>     one session Lease per member (renewed; a hash of the identity when the name
                               would be invalid); labels shard-set=<name>, shard-role=member
Every member lists and watches the set with the label selector elector-sidecar.io/shard-set=<name>, creates
and updates the shard Leases and its session Lease, and deletes the session Leases of members that left.
*/}}

{{/* elector-sidecar.shards: election.shards as an integer (0: one Lease, no shards). */}}
{{- define "elector-sidecar.shards" -}}
{{- int64 (.Values.election.shards | default 0) }}
{{- end }}

{{/*
elector-sidecar.validateShards: the combinations shard mode rules out, and the length of the set's names.
Included by elector-sidecar.validate.
*/}}
{{- define "elector-sidecar.validateShards" -}}
{{- $n := include "elector-sidecar.shards" . | int64 }}
{{- if gt $n 0 }}
{{- $set := include "elector-sidecar.leaseName" . }}
{{- /* The set's name is the value of the label elector-sidecar.io/shard-set (pkg/shards Config.Validate). */}}
{{- if gt (len $set) 63 }}
{{- fail (printf "election.leaseName %q is %d characters: with election.shards it names the set in the label elector-sidecar.io/shard-set of every Lease of the set, a label value of at most 63 characters" $set (len $set)) }}
{{- end }}
{{- if .Values.leaderLabel.enabled }}
{{- fail (printf "leaderLabel.enabled=true with election.shards=%d: a shard set has no one leader pod to label (every pod owns some shards); set leaderLabel.enabled=false (and leaderService.enabled=false)" $n) }}
{{- end }}
{{- if and .Values.fence.enabled .Values.fence.holderCheck.enabled }}
{{- fail (printf "fence.holderCheck.enabled=true with election.shards=%d: the holder check compares the token with one Lease's holder and leaseTransitions, and a shard set has one Lease per shard; set fence.holderCheck.enabled=false (the token check of fence.enabled still works per object)" $n) }}
{{- end }}
{{- if .Values.metrics.prometheusRule.enabled }}
{{- fail (printf "metrics.prometheusRule.enabled=true with election.shards=%d: its alerts want exactly one leader per Lease (elector_is_leader), which a shard set does not have; set metrics.prometheusRule.enabled=false" $n) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
elector-sidecar.shardRoleRules: the Role's Lease rules in shard mode, a list of PolicyRules. RBAC cannot
limit a label-selected list or watch, or a create, to names: every Lease of the namespace. The lease guard
(leaseGuard.enabled) narrows the writes back to the set's Leases.
*/}}
{{- define "elector-sidecar.shardRoleRules" -}}
# Shard mode (election.shards): each member lists and watches the set's Leases (label selector
# elector-sidecar.io/shard-set={{ include "elector-sidecar.leaseName" . }}), creates and updates the shard
# Leases <name>-<i> and its session Lease <name>-member-<pod>, and deletes the session Leases of members that
# left. RBAC cannot limit a label-selected list or watch to names: every Lease of the namespace (the lease
# guard, leaseGuard.enabled, lets this ServiceAccount write only the set's Leases).
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
{{- end }}

{{/*
elector-sidecar.shardSetGuard: the lease guard of a shard set (leaseGuard.enabled with election.shards), a
ValidatingAdmissionPolicy + binding named like the single Lease's guard. The single Lease's rules, carried
over to every Lease of the set (picked by name, <set>-<digits> and <set>-member-*, or by the label
elector-sidecar.io/shard-set=<set>, on the old or the new object):
  - a shard Lease is never deleted (that resets its fencing token to 0); a session Lease may be deleted (a
    member ends a departed member's session; a new session Lease has a new UID, which no shard names);
  - spec.leaseTransitions (a shard's token, a session's term) never decreases, rises by at most 10000 a write;
and, since the Role must grant writes on every Lease of the namespace:
  - only the release's ServiceAccount writes (creates, updates, deletes) the set's Leases, and it writes
    no other Lease of the namespace;
  - the set's labels (shard-set, shard-role, shard-index) are never changed or removed: the members see the
    set through them.
The exempt users (leaseGuard.exemptUsers) may do anything; deletes in a terminating namespace are allowed.
*/}}
{{- define "elector-sidecar.shardSetGuard" -}}
{{- $name := printf "%s.%s.lease-guard.elector-sidecar" (include "elector-sidecar.fullname" .) .Release.Namespace }}
{{- $set := include "elector-sidecar.leaseName" . }}
{{- $sa := printf "system:serviceaccount:%s:%s" .Release.Namespace (include "elector-sidecar.serviceAccountName" .) }}
{{- $shardRE := printf "^%s-[0-9]+$" (replace "." "[.]" $set) }}
{{- $inSet := "(%[1]s.metadata.name.matches('%[2]s') || %[1]s.metadata.name.startsWith('%[3]s-member-') || (has(%[1]s.metadata.labels) && 'elector-sidecar.io/shard-set' in %[1]s.metadata.labels && %[1]s.metadata.labels['elector-sidecar.io/shard-set'] == '%[3]s'))" }}
{{- $inSetObject := printf $inSet "object" $shardRE $set }}
{{- $inSetOld := printf $inSet "oldObject" $shardRE $set }}
{{- $what := printf "variables.kind + ' lease ' + request.namespace + '/' + variables.name + ' of shard set %s is guarded by elector-sidecar" $set }}
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
        operations: ["CREATE", "UPDATE", "DELETE"]
  matchConditions:
    # The set's Leases (whoever writes them), and any Lease the set's ServiceAccount writes.
    - name: guarded-shard-set
      expression: {{ printf "(object != null && %s) || (oldObject != null && %s) || request.userInfo.username == '%s'" $inSetObject $inSetOld $sa | quote }}
  variables:
    - name: name
      expression: "request.operation == 'DELETE' ? oldObject.metadata.name : object.metadata.name"
    - name: inSet
      expression: {{ printf "(object != null && %s) || (oldObject != null && %s)" $inSetObject $inSetOld | quote }}
    - name: oldLabels
      expression: "oldObject != null && has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}"
    - name: newLabels
      expression: "object != null && has(object.metadata.labels) ? object.metadata.labels : {}"
    - name: isShard
      expression: {{ printf "variables.name.matches('%s') || [variables.oldLabels, variables.newLabels].exists(l, 'elector-sidecar.io/shard-role' in l && l['elector-sidecar.io/shard-role'] == 'shard')" $shardRE | quote }}
    - name: kind
      expression: "variables.isShard ? 'shard' : 'member'"
    - name: setWriter
      expression: {{ printf "request.userInfo.username == '%s'" $sa | quote }}
    - name: namespaceTerminating
      expression: "namespaceObject != null && has(namespaceObject.metadata.deletionTimestamp)"
    - name: exemptUser
      expression: {{ printf "request.userInfo.username in %s" (toJson .Values.leaseGuard.exemptUsers | replace "\"" "'") | quote }}
  validations:
    - expression: "variables.inSet || variables.exemptUser"
      messageExpression: {{ printf "'lease ' + request.namespace + '/' + variables.name + ' is not a Lease of shard set %s: elector-sidecar guards the set, so its ServiceAccount %s writes only the Leases of the set'" $set $sa | quote }}
      reason: Forbidden
    - expression: "variables.setWriter || variables.exemptUser || (request.operation == 'DELETE' && variables.namespaceTerminating)"
      messageExpression: {{ printf "%s: only its members, ServiceAccount %s, write it (not ' + request.userInfo.username + '); its holder and spec.leaseTransitions (the fencing token) are theirs'" $what $sa | quote }}
      reason: Forbidden
    - expression: "request.operation != 'DELETE' || !variables.isShard || variables.namespaceTerminating || variables.exemptUser"
      messageExpression: {{ printf "%s: deleting it resets spec.leaseTransitions (the fencing token of the shard) to 0, so stale owners could write again. Delete the namespace, or remove ValidatingAdmissionPolicyBinding %s first.'" $what $name | quote }}
      reason: Forbidden
    - expression: "request.operation != 'UPDATE' || !has(oldObject.spec.leaseTransitions) || (has(object.spec.leaseTransitions) && object.spec.leaseTransitions >= oldObject.spec.leaseTransitions) || variables.exemptUser"
      messageExpression: {{ printf "%s: spec.leaseTransitions (the fencing token) must not decrease (from ' + string(oldObject.spec.leaseTransitions) + ' to ' + (has(object.spec.leaseTransitions) ? string(object.spec.leaseTransitions) : 'unset') + ')'" $what | quote }}
      reason: Forbidden
    - expression: "request.operation != 'UPDATE' || !has(object.spec.leaseTransitions) || object.spec.leaseTransitions - (has(oldObject.spec.leaseTransitions) ? oldObject.spec.leaseTransitions : 0) <= 10000 || variables.exemptUser"
      messageExpression: {{ printf "%s: spec.leaseTransitions (the fencing token) may rise by at most 10000 in one write (from ' + (has(oldObject.spec.leaseTransitions) ? string(oldObject.spec.leaseTransitions) : 'unset') + ' to ' + string(object.spec.leaseTransitions) + '): tokens end at 2147483647'" $what | quote }}
      reason: Forbidden
    - expression: "request.operation != 'UPDATE' || ['elector-sidecar.io/shard-set', 'elector-sidecar.io/shard-role', 'elector-sidecar.io/shard-index'].all(k, !(k in variables.oldLabels) || (k in variables.newLabels && variables.newLabels[k] == variables.oldLabels[k])) || variables.exemptUser"
      messageExpression: {{ printf "%s: its labels elector-sidecar.io/shard-set, shard-role and shard-index must not change (the members find the set by them)'" $what | quote }}
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
