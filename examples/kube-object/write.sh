#!/usr/bin/env bash
# Writes the ConfigMap $NAME (data.plan = $1) through the fence for Kubernetes objects (README "Fencing
# Kubernetes objects"): the current fencing token from the sidecar (curl /token), stamped as the annotation
# elector-sidecar.io/fencing-token, in one server-side apply with kubectl. The API server's fence policy
# rejects the write if the ConfigMap already carries a higher token (a newer leader wrote it).
#
#   ELECTOR_URL  the sidecar's local API (default http://127.0.0.1:4040)
#   NAME         the ConfigMap (default plan); NAMESPACE: kubectl's namespace unless set
#
# Exit status: 0 written, 2 not the leader (no token), 3 rejected as stale, 1 any other error.
set -o errexit -o nounset -o pipefail

ELECTOR_URL=${ELECTOR_URL:-http://127.0.0.1:4040}
NAME=${NAME:-plan}
ns=()
if [ -n "${NAMESPACE:-}" ]; then ns=(--namespace "$NAMESPACE"); fi
plan=${1:?usage: write.sh PLAN}

if ! token=$(curl -sf -H 'Accept: text/plain' "$ELECTOR_URL/token"); then
  echo "not the leader: no fencing token" >&2
  exit 2
fi

# The object, built by kubectl (no hand-quoted YAML), labelled for the fence's objectSelector and stamped.
if ! out=$(kubectl create configmap "$NAME" "${ns[@]}" --from-literal=plan="$plan" --dry-run=client -o yaml \
  | kubectl label --local -f - elector-sidecar.io/fenced=true -o yaml \
  | kubectl annotate --local -f - elector-sidecar.io/fencing-token="$token" -o yaml \
  | kubectl apply "${ns[@]}" --server-side --force-conflicts --field-manager=kube-object-example -f - 2>&1); then
  if grep -q 'stale fencing token' <<<"$out"; then
    echo "rejected: $out" >&2
    exit 3
  fi
  echo "$out" >&2
  exit 1
fi
echo "written with fencing token $token"
