#!/usr/bin/env bash
# Smoke test for a running hack/local-cluster.sh cluster (run it as `hack/local-cluster.sh smoke`):
# a 2-replica Deployment of the pause image, a pod whose app container and native sidecar share localhost,
# a pod using the in-cluster config, kubectl logs/exec, pod IP reachable from the host, graceful delete
# (SIGTERM reaches the app), and Deployment pods recreated after delete. Cleans up its namespace.
set -o errexit -o nounset -o pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

eval "$("$ELECTOR_ROOT/hack/local-cluster.sh" env)"
export PATH="$ELECTOR_BIN:$PATH"
"$ELECTOR_ROOT/hack/local-cluster.sh" status >/dev/null || die "the local cluster is not running (hack/local-cluster.sh up)"

NS=elector-smoke
IMG=elector.local/testbin:smoke
IMAGES="$ELECTOR_CACHE/images"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
PASSED=0
FAILED=0

check() { # check DESC CMD...
  local desc="$1"
  shift
  if "$@" >"$WORK/out" 2>&1; then
    log "PASS: $desc"
    PASSED=$((PASSED + 1))
  else
    log "FAIL: $desc"
    sed 's/^/    /' "$WORK/out" >&2
    FAILED=$((FAILED + 1))
  fi
}

# The test image: test/cmd/testbin (the test module), static, in a single-layer image.
mkdir -p "$IMAGES"
GOFLAGS=-buildvcs=false GOWORK=off CGO_ENABLED=0 go -C "$ELECTOR_ROOT/test" build -trimpath -o "$IMAGES/testbin.bin" ./cmd/testbin
mkimage --out "$IMAGES/testbin.tar" --tag "$IMG" --file "$IMAGES/testbin.bin:/testbin" --entrypoint /testbin
ctr --address "$ELECTOR_CLUSTER_CONTAINERD_SOCK" --namespace k8s.io images import "$IMAGES/testbin.tar" >/dev/null 2>&1 ||
  die "ctr images import $IMAGES/testbin.tar failed"
log "imported $IMG"

# A free host port for the hostPort check (CNI portmap, nftables backend).
for _ in $(seq 100); do
  HOST_PORT=$((30000 + RANDOM % 2000))
  [[ -z "$(ss -Htln "sport = :$HOST_PORT" 2>/dev/null)" ]] && break
done

kubectl delete namespace "$NS" --ignore-not-found --wait --timeout=120s >/dev/null
kubectl create namespace "$NS" >/dev/null
# The namespace's default ServiceAccount appears asynchronously.
for _ in $(seq 60); do kubectl -n "$NS" get serviceaccount default >/dev/null 2>&1 && break; sleep 1; done

kubectl -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: Deployment
metadata:
  name: pause
spec:
  replicas: 2
  selector:
    matchLabels: {app: pause}
  template:
    metadata:
      labels: {app: pause}
    spec:
      terminationGracePeriodSeconds: 30
      containers:
      - name: pause
        image: $ELECTOR_CLUSTER_PAUSE_IMAGE
        imagePullPolicy: Never
---
apiVersion: v1
kind: Pod
metadata:
  name: duo
spec:
  terminationGracePeriodSeconds: 30
  initContainers:
  - name: poller
    image: $IMG
    imagePullPolicy: Never
    restartPolicy: Always
    args: [poll, "http://127.0.0.1:8080/"]
  containers:
  - name: server
    image: $IMG
    imagePullPolicy: Never
    args: [serve, ":8080"]
    ports:
    - containerPort: 8080
      hostPort: $HOST_PORT
    readinessProbe:
      httpGet: {port: 8080, path: /}
      periodSeconds: 1
---
apiVersion: v1
kind: Pod
metadata:
  name: kube
spec:
  restartPolicy: OnFailure
  containers:
  - name: kube
    image: $IMG
    imagePullPolicy: Never
    args: [kube, /version]
EOF

check "deployment pause: 2 replicas available" kubectl -n "$NS" rollout status deployment/pause --timeout=180s
check "pod duo Ready (app + native sidecar)" kubectl -n "$NS" wait pod/duo --for=condition=Ready --timeout=180s
check "pod kube Succeeded (in-cluster config via the kubernetes Service)" \
  kubectl -n "$NS" wait pod/kube --for=jsonpath='{.status.phase}'=Succeeded --timeout=120s
check "kubectl logs: kube pod got 200 from /version" bash -c "kubectl -n $NS logs kube | grep -q '200 OK'"
check "kubectl logs: sidecar reached the app over localhost" bash -c "for i in \$(seq 20); do kubectl -n $NS logs duo -c poller | grep -q 'hello from duo' && exit 0; sleep 1; done; exit 1"
check "kubectl exec into the app container" bash -c "kubectl -n $NS exec duo -c server -- /testbin get http://127.0.0.1:8080/ | grep -q 'hello from duo'"
POD_IP="$(kubectl -n "$NS" get pod duo -o jsonpath='{.status.podIP}')"
check "host reaches pod IP $POD_IP" bash -c "curl -fsS --max-time 5 http://$POD_IP:8080/ | grep -q 'hello from duo'"

check "host reaches hostPort $ELECTOR_CLUSTER_NODE_IP:$HOST_PORT" bash -c "curl -fsS --max-time 5 http://$ELECTOR_CLUSTER_NODE_IP:$HOST_PORT/ | grep -q 'hello from duo'"

# Graceful delete: the app logs the SIGTERM it gets and exits well before the 30 s grace period.
kubectl -n "$NS" logs -f duo -c server >"$WORK/server.log" 2>&1 &
LOGS_PID=$!
sleep 1
start=$(date +%s)
check "kubectl delete pod duo (graceful)" kubectl -n "$NS" delete pod duo --wait --timeout=60s
elapsed=$(($(date +%s) - start))
wait "$LOGS_PID" 2>/dev/null || true
check "app got SIGTERM and exited in ${elapsed}s (< 20s)" bash -c "grep -q 'got signal' '$WORK/server.log' && [ $elapsed -lt 20 ]"

# Deployment pods come back after a delete.
check "delete deployment pods" kubectl -n "$NS" delete pod -l app=pause --wait --timeout=60s
check "deployment pause recovers 2 replicas" kubectl -n "$NS" rollout status deployment/pause --timeout=120s

check "delete namespace $NS" kubectl delete namespace "$NS" --wait --timeout=120s

echo "smoke: $PASSED passed, $FAILED failed"
[[ $FAILED -eq 0 ]]
