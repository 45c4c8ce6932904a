#!/usr/bin/env bash
# A real single-node Kubernetes cluster on this machine (root, no Docker, no registry), built from the Go
# module proxy by hack/build-binaries.sh --cluster: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, containerd (+ seccomp runc) and a kubelet, with bridge CNI networking (pods 10.88.0.0/16).
#
#   hack/local-cluster.sh up       build what is missing, start the cluster on free ports, wait for a Ready node
#   hack/local-cluster.sh down     stop everything and undo all host changes (idempotent)
#   hack/local-cluster.sh env      print `export KUBECONFIG=...` and PATH lines (eval "$(hack/local-cluster.sh env)")
#   hack/local-cluster.sh status   print component PIDs/ports and node status; exit 1 if not running
#   hack/local-cluster.sh smoke    run the smoke test (Deployment, 2-container pod, logs, exec, graceful delete)
#
# Environment:
#   ELECTOR_CACHE_DIR  cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/elector-sidecar); state in $CACHE/cluster
#   ELECTOR_IMAGES     space-separated image tarballs (docker/OCI archive) that `up` imports into containerd,
#                      so pods can use them with imagePullPolicy: Never/IfNotPresent
#
# Pods reach the API server through the usual in-cluster config: `up` adds an nftables DNAT from the
# "kubernetes" Service (10.96.0.1:443) to the API server (there is no kube-proxy and no cluster DNS).
# The pause image (registry.k8s.io/pause:<tag>) is compiled from the k8s.io/kubernetes module source.
# Only one such cluster can run per machine (it owns the kubepods cgroups and the elector0 bridge).
set -o errexit -o nounset -o pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

STATE="$ELECTOR_CACHE/cluster"
RUN="$STATE/run"   # pid files, ports
LOGS="$STATE/logs" # component logs
PKI="$STATE/pki"
ETC="$STATE/etc"
DATA="$STATE/data" # etcd, containerd root/state, kubelet root, CNI state: wiped by down
IMAGES="$ELECTOR_CACHE/images"
KUBECONFIG_PATH="$STATE/kubeconfig"
IP_FORWARD_SAVE="$STATE/ip_forward.orig"

NODE_NAME="elector-node"
POD_SUBNET="10.88.0.0/16"
SERVICE_CIDR="10.96.0.0/16"
KUBERNETES_SVC_IP="10.96.0.1"
BRIDGE="elector0"
NFT_TABLE="elector_sidecar"
CGROUP_NAME="elector-sidecar-cluster" # v1 pids cgroup holding every process `up` starts (and containerd's shims)
PIDS_CG="/sys/fs/cgroup/pids/$CGROUP_NAME"
# Machine-wide: the lock serialising up/down, and the state dir of the cluster that owns the machine's
# cluster resources (bridge, kubepods cgroups, DNAT), so that a cluster from another cache dir is never torn down.
GLOBAL_LOCK="/run/lock/elector-sidecar-cluster.lock"
OWNER_FILE="/run/elector-sidecar-cluster.owner"

# Components in start order; down stops them in reverse order.
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet)

kubectl_() { "$ELECTOR_BIN/kubectl" --kubeconfig "$KUBECONFIG_PATH" "$@"; }

# ---------------------------------------------------------------------------------------------------------
# process helpers

# alive PID: true if PID runs (not a zombie).
alive() {
  local pid="$1" st
  [[ -n "$pid" && -r "/proc/$pid/stat" ]] || return 1
  st="$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)"
  [[ -n "$st" && "$st" != Z && "$st" != X ]]
}

# ours NAME PID: true if PID is alive and runs the binary recorded for NAME (guards against PID reuse).
ours() {
  local name="$1" pid="$2" exe want
  alive "$pid" || return 1
  [[ -f "$RUN/$name.exe" ]] || return 1
  want="$(cat "$RUN/$name.exe")"
  exe="$(readlink "/proc/$pid/exe" 2>/dev/null || true)"
  [[ "${exe% (deleted)}" == "$want" ]]
}

pid_of() { cat "$RUN/$1.pid" 2>/dev/null || true; }

# stop_pid NAME PID TIMEOUT: SIGTERM, wait up to TIMEOUT seconds, then SIGKILL.
stop_pid() {
  local name="$1" pid="$2" timeout="$3" i
  alive "$pid" || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < timeout * 10; i++)); do
    alive "$pid" || return 0
    sleep 0.1
  done
  log "$name (pid $pid) did not stop within ${timeout}s, sending SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    alive "$pid" || return 0
    sleep 0.1
  done
  log "WARNING: $name (pid $pid) still alive after SIGKILL"
}

# cgroup_pids DIR: all PIDs in a v1 cgroup tree.
cgroup_pids() {
  [[ -d "$1" ]] || return 0
  find "$1" -name cgroup.procs -exec cat {} + 2>/dev/null || true
}

# kill_cgroup DIR: SIGKILL every process in a v1 cgroup tree until it is empty (at most ~10 s).
kill_cgroup() {
  local dir="$1" i pids
  for ((i = 0; i < 100; i++)); do
    pids="$(cgroup_pids "$dir")"
    [[ -z "$pids" ]] && return 0
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.1
  done
  log "WARNING: processes left in $dir: $(cgroup_pids "$dir" | tr '\n' ' ')"
}

# start NAME BIN ARGS...: starts a component detached (own session, stdin /dev/null, log file), inside the
# cluster's pids cgroup, and records its PID and binary.
start() {
  local name="$1" bin="$2"
  shift 2
  mkdir -p "$RUN" "$LOGS"
  readlink -f "$bin" >"$RUN/$name.exe"
  # The bash wrapper joins the cgroup and execs the binary, so $! is the component's PID.
  # shellcheck disable=SC2016
  setsid bash -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' _ "$PIDS_CG" "$bin" "$@" \
    >"$LOGS/$name.log" 2>&1 </dev/null 9>&- &
  echo $! >"$RUN/$name.pid"
  log "started $name (pid $!, log $LOGS/$name.log)"
}

# check_running: fails (with the log tail) if a started component died.
check_running() {
  local c pid
  for c in "${COMPONENTS[@]}"; do
    [[ -f "$RUN/$c.pid" ]] || continue
    pid="$(pid_of "$c")"
    if ! alive "$pid"; then
      log "$c (pid $pid) exited; last lines of $LOGS/$c.log:"
      tail -n 30 "$LOGS/$c.log" >&2 || true
      return 1
    fi
  done
}

# wait_for DESC TIMEOUT CMD...: polls CMD every second until it succeeds; fails early if a component died.
wait_for() {
  local desc="$1" timeout="$2" start
  shift 2
  start=$(date +%s)
  log "waiting for $desc"
  while ! "$@" >/dev/null 2>&1; do
    check_running || die "a component died while waiting for $desc"
    if (($(date +%s) - start >= timeout)); then
      die "timed out after ${timeout}s waiting for $desc (logs in $LOGS)"
    fi
    sleep 1
  done
  log "$desc: ok after $(($(date +%s) - start))s"
}

# ---------------------------------------------------------------------------------------------------------
# host helpers

node_ip() {
  local dev ip
  dev="$(ip -4 route show default 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "dev") { print $(i + 1); exit }}')"
  [[ -n "$dev" ]] || dev=eth0
  ip="$(ip -4 -o addr show dev "$dev" scope global 2>/dev/null | awk '{print $4; exit}' | cut -d/ -f1)"
  [[ -n "$ip" ]] || ip="$(ip -4 -o addr show scope global | awk '{print $4; exit}' | cut -d/ -f1)"
  [[ -n "$ip" ]] || die "cannot find a non-loopback IPv4 address for --node-ip"
  echo "$ip"
}

# free_port: a TCP port in 20000-29999 that nothing listens on and that this run did not hand out yet.
PICKED=" "
free_port() {
  local p i
  for ((i = 0; i < 200; i++)); do
    p=$((20000 + (RANDOM * 32768 + RANDOM) % 10000))
    [[ "$PICKED" == *" $p "* ]] && continue
    if [[ -z "$(ss -Htln "sport = :$p" 2>/dev/null)" ]]; then
      PICKED+="$p "
      echo "$p"
      return 0
    fi
  done
  die "no free TCP port found"
}

# unmount_under DIR: unmounts every mount point at or below DIR, deepest first (lazy as a last resort).
unmount_under() {
  local dir="$1" pass mp mps
  [[ -e "$dir" ]] || return 0
  dir="$(readlink -f "$dir")"
  for pass in 1 2 3 4 5; do
    mps="$(awk -v d="$dir" '{ mp = $5; gsub(/\\040/, " ", mp); if (mp == d || index(mp, d "/") == 1) print mp }' \
      /proc/self/mountinfo | awk '{ print length($0) "\t" $0 }' | sort -rn | cut -f2-)"
    [[ -z "$mps" ]] && return 0
    while IFS= read -r mp; do
      if [[ $pass -lt 4 ]]; then
        umount "$mp" 2>/dev/null || true
      else
        umount -l "$mp" 2>/dev/null || true
      fi
    done <<<"$mps"
  done
  if awk -v d="$dir" '{ if ($5 == d || index($5, d "/") == 1) found = 1 } END { exit !found }' /proc/self/mountinfo; then
    log "WARNING: mounts left under $dir"
  fi
}

# ---------------------------------------------------------------------------------------------------------
# down

# other_owner: prints the state dir of another live cluster on this machine, if there is one.
other_owner() {
  local o
  [[ -f "$OWNER_FILE" ]] || return 1
  o="$(cat "$OWNER_FILE")"
  [[ -n "$o" && "$o" != "$STATE" ]] || return 1
  [[ -n "$(cgroup_pids "$PIDS_CG")" ]] || return 1
  echo "$o"
}

# stop_components: stops this state dir's components by their recorded PIDs, in reverse start order.
stop_components() {
  local c pid name
  for ((c = ${#COMPONENTS[@]} - 1; c >= 0; c--)); do
    name="${COMPONENTS[$c]}"
    pid="$(pid_of "$name")"
    if ours "$name" "$pid"; then
      log "stopping $name (pid $pid)"
      stop_pid "$name" "$pid" 15
    fi
  done
}

down() {
  local c pid other
  if other="$(other_owner)"; then
    log "WARNING: the running local cluster belongs to $other, not $STATE: leaving it (and the host's bridge, cgroups, DNAT) alone"
    stop_components
    unmount_under "$DATA"
    rm -rf "$DATA" "$RUN" "$ETC" "$PKI" "$KUBECONFIG_PATH"
    return 0
  fi
  # kubelet first, so it does not restart containers while they are being stopped.
  pid="$(pid_of kubelet)"
  if ours kubelet "$pid"; then
    log "stopping kubelet (pid $pid)"
    stop_pid kubelet "$pid" 15
  fi
  # Pod processes (they live in the kubepods cgroups, outside the cluster's own cgroup).
  if [[ -n "$(cgroup_pids /sys/fs/cgroup/pids/kubepods)" ]]; then
    log "killing pod processes"
    kill_cgroup /sys/fs/cgroup/pids/kubepods
  fi
  stop_components
  # Whatever is left in the cluster's cgroup (containerd shims, a component whose pid file was lost).
  if [[ -n "$(cgroup_pids "$PIDS_CG")" ]]; then
    log "killing remaining cluster processes (shims)"
    kill_cgroup "$PIDS_CG"
  fi
  kill_cgroup /sys/fs/cgroup/pids/kubepods

  # Mounts: kubelet's bind mount of its root dir, pod volumes, container rootfs, sandbox shm, netns.
  unmount_under "$DATA"

  # Network: DNAT table, bridge, ip_forward.
  # (cni_hostport: the portmap plugin's table, left behind when pods with hostPorts were killed.)
  local table
  if command -v nft >/dev/null; then
    for table in "ip $NFT_TABLE" "ip cni_hostport" "ip6 cni_hostport"; do
      # shellcheck disable=SC2086
      if nft list table $table >/dev/null 2>&1; then
        nft delete table $table || log "WARNING: could not delete nftables table $table"
      fi
    done
  fi
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link delete "$BRIDGE" || log "WARNING: could not delete link $BRIDGE"
  fi
  if [[ -f "$IP_FORWARD_SAVE" ]]; then
    local orig
    orig="$(cat "$IP_FORWARD_SAVE")"
    if [[ "$orig" == 0 || "$orig" == 1 ]]; then
      echo "$orig" >/proc/sys/net/ipv4/ip_forward || log "WARNING: could not restore net.ipv4.ip_forward=$orig"
    fi
    rm -f "$IP_FORWARD_SAVE"
  fi

  # cgroups: kubepods (every v1 hierarchy), the cluster's own, and containerd's "k8s.io" namespace cgroup
  # (only empty cgroups can be removed, so one in use by another containerd stays).
  local hier
  for hier in /sys/fs/cgroup/*/; do
    for c in "${hier}kubepods" "${hier}$CGROUP_NAME" "${hier}k8s.io"; do
      [[ -d "$c" ]] || continue
      find "$c" -depth -type d -exec rmdir {} + 2>/dev/null || true
      if [[ -d "$c" && "$c" != *k8s.io ]]; then log "WARNING: could not remove cgroup $c"; fi
    done
  done

  # kubelet's log symlinks for our pods.
  local l
  for l in /var/log/containers/*.log; do
    [[ -L "$l" ]] || continue
    [[ "$(readlink "$l")" == "$STATE"/* ]] && rm -f "$l"
  done

  rm -rf "$DATA" "$RUN" "$ETC" "$PKI" "$KUBECONFIG_PATH" 2>/dev/null || {
    unmount_under "$DATA"
    rm -rf "$DATA" "$RUN" "$ETC" "$PKI" "$KUBECONFIG_PATH"
  }
  rm -f "$OWNER_FILE"
}

# ---------------------------------------------------------------------------------------------------------
# up

# cert NAME CN ORG EXTKEYUSAGE [SANS]: a key + certificate signed by the cluster CA.
cert() {
  local name="$1" cn="$2" org="$3" eku="$4" sans="${5:-}" subj="/CN=$2"
  [[ -n "$org" ]] && subj="/O=$org/CN=$cn"
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$eku"
    [[ -n "$sans" ]] && echo "subjectAltName=$sans"
  } >"$PKI/$name.ext"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$PKI/$name.key" -out "$PKI/$name.csr" -subj "$subj" 2>/dev/null
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -set_serial "0x$(openssl rand -hex 16)" \
    -days 3650 -sha256 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

# kubeconfig FILE CERTNAME: a kubeconfig for the API server using the client certificate CERTNAME.
kubeconfig() {
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: elector-local
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 <"$PKI/$2.crt")
    client-key-data: $(base64 -w0 <"$PKI/$2.key")
contexts:
- name: elector-local
  context:
    cluster: elector-local
    user: $2
    namespace: default
current-context: elector-local
EOF
  chmod 600 "$1"
}

make_pki() {
  log "generating certificates"
  mkdir -p "$PKI"
  chmod 700 "$PKI"
  openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$PKI/ca.key" -out "$PKI/ca.crt" -days 3650 -sha256 \
    -subj "/CN=elector-sidecar-local-ca" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
  cert apiserver kube-apiserver "" serverAuth \
    "IP:127.0.0.1,IP:$NODE_IP,IP:$KUBERNETES_SVC_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters clientAuth
  cert admin elector-admin system:masters clientAuth
  cert kube-controller-manager system:kube-controller-manager "" clientAuth
  cert kube-scheduler system:kube-scheduler "" clientAuth
  cert kubelet "system:node:$NODE_NAME" system:nodes "clientAuth"
  cert kubelet-serving "system:node:$NODE_NAME" system:nodes serverAuth "IP:$NODE_IP,IP:127.0.0.1,DNS:$NODE_NAME,DNS:localhost"
  openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
  openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  mkdir -p "$ETC"
  kubeconfig "$KUBECONFIG_PATH" admin
  kubeconfig "$ETC/kube-controller-manager.kubeconfig" kube-controller-manager
  kubeconfig "$ETC/kube-scheduler.kubeconfig" kube-scheduler
  kubeconfig "$ETC/kubelet.kubeconfig" kubelet
}

# pause_image: builds (once) the pause image tarball from the k8s.io/kubernetes source; sets PAUSE_TAR, PAUSE_REF.
pause_image() {
  local dir tag
  dir="$(cd / && GOFLAGS=-buildvcs=false go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [[ -f "$dir/build/pause/linux/pause.c" ]] || die "pause.c not found in k8s.io/kubernetes@$K8S_VERSION ($dir)"
  tag="$(sed -n 's/^TAG ?= *//p' "$dir/build/pause/Makefile" | head -1)"
  [[ -n "$tag" ]] || die "cannot read the pause TAG from $dir/build/pause/Makefile"
  PAUSE_REF="registry.k8s.io/pause:$tag"
  PAUSE_TAR="$IMAGES/pause-$tag.tar"
  mkdir -p "$IMAGES"
  if [[ -f "$PAUSE_TAR" && "$(cat "$PAUSE_TAR.stamp" 2>/dev/null)" == "$K8S_VERSION $tag mkimage" ]]; then
    return 0
  fi
  log "building the pause image $PAUSE_REF from $dir/build/pause/linux/pause.c"
  gcc -Os -Wall -static -DVERSION="v$tag-elector" -o "$IMAGES/pause.bin" "$dir/build/pause/linux/pause.c"
  mkimage --out "$PAUSE_TAR" --tag "$PAUSE_REF" --file "$IMAGES/pause.bin:/pause" --entrypoint /pause --user 65535:65535 >/dev/null
  echo "$K8S_VERSION $tag mkimage" >"$PAUSE_TAR.stamp"
}

write_configs() {
  mkdir -p "$ETC" "$DATA/cni/net.d" "$DATA/kubelet" "$DATA/pod-logs" "$DATA/manifests" "$DATA/containerd/root" \
    "$DATA/containerd/state" "$DATA/containerd/runc" "$DATA/containerd/opt" "$DATA/cni/ipam" "$DATA/kubelet-plugins"
  cat >"$DATA/cni/net.d/10-elector.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "elector",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$POD_SUBNET" }]],
        "routes": [{ "dst": "0.0.0.0/0" }],
        "dataDir": "$DATA/cni/ipam"
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true }, "backend": "nftables" }
  ]
}
EOF
  cat >"$ETC/containerd.toml" <<EOF
version = 4
root = '$DATA/containerd/root'
state = '$DATA/containerd/state'
imports = []
disabled_plugins = ['io.containerd.nri.v1.nri']
oom_score = 0

[plugins]
  [plugins.'io.containerd.server.v1.grpc']
    address = '$CONTAINERD_SOCK'
  [plugins.'io.containerd.server.v1.ttrpc']
    address = '$CONTAINERD_SOCK.ttrpc'
  [plugins.'io.containerd.server.v1.debug']
    address = ''
  [plugins.'io.containerd.server.v1.metrics']
    address = ''

  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '$PAUSE_REF'

  [plugins.'io.containerd.cri.v1.runtime']
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = '$ELECTOR_BIN/runc'
          Root = '$DATA/containerd/runc'
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['$ELECTOR_BIN/cni']
      conf_dir = '$DATA/cni/net.d'

  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'

  [plugins.'io.containerd.internal.v1.opt']
    path = '$DATA/containerd/opt'
EOF
  cat >"$ETC/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 0.0.0.0
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $PKI/ca.crt
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
imageServiceEndpoint: unix://$CONTAINERD_SOCK
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
makeIPTablesUtilChains: false
resolvConf: /etc/resolv.conf
clusterDomain: cluster.local
staticPodPath: $DATA/manifests
podLogsDir: $DATA/pod-logs
volumePluginDir: $DATA/kubelet-plugins
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 1Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
  imagefs.inodesFree: 1%
evictionPressureTransitionPeriod: 10s
serializeImagePulls: false
EOF
}

# import_images: imports the pause image and every tarball in $ELECTOR_IMAGES.
import_images() {
  import_tar "$PAUSE_TAR"
  import_extra_images
  log "images: $(ctr_ images ls -q 2>/dev/null | grep -v '^sha256:' | tr '\n' ' ')"
}

ctr_() { "$ELECTOR_BIN/ctr" --address "$CONTAINERD_SOCK" --namespace k8s.io "$@"; }

# import_tar TAR: imports an image tarball (docker-archive or OCI layout) into containerd's k8s.io namespace.
import_tar() {
  [[ -f "$1" ]] || die "image tarball $1 does not exist"
  ctr_ images import "$1" >>"$LOGS/ctr-import.log" 2>&1 || {
    tail -n 20 "$LOGS/ctr-import.log" >&2
    die "importing $1 failed"
  }
}

import_extra_images() {
  local t
  for t in ${ELECTOR_IMAGES:-}; do
    log "importing image $t"
    import_tar "$t"
  done
}

# service_dnat: makes the "kubernetes" Service (10.96.0.1:443) reach the API server (no kube-proxy here).
service_dnat() {
  command -v nft >/dev/null || die "nft (Debian package nftables) is needed for the kubernetes Service DNAT"
  nft -f - <<EOF || die "nftables DNAT for $KUBERNETES_SVC_IP:443 failed"
table ip $NFT_TABLE
delete table ip $NFT_TABLE
table ip $NFT_TABLE {
  chain prerouting {
    type nat hook prerouting priority -100; policy accept;
    ip daddr $KUBERNETES_SVC_IP tcp dport 443 dnat to $NODE_IP:$API_PORT
  }
  chain output {
    type nat hook output priority -100; policy accept;
    ip daddr $KUBERNETES_SVC_IP tcp dport 443 dnat to $NODE_IP:$API_PORT
  }
}
EOF
}

node_ready() {
  [[ "$(kubectl_ get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}

write_env() {
  cat >"$RUN/cluster.env" <<EOF
KUBECONFIG=$KUBECONFIG_PATH
ELECTOR_CLUSTER_NODE_NAME=$NODE_NAME
ELECTOR_CLUSTER_NODE_IP=$NODE_IP
ELECTOR_CLUSTER_API_PORT=$API_PORT
ELECTOR_CLUSTER_ETCD_PORT=$ETCD_PORT
ELECTOR_CLUSTER_KUBELET_PORT=$KUBELET_PORT
ELECTOR_CLUSTER_CONTAINERD_SOCK=$CONTAINERD_SOCK
ELECTOR_CLUSTER_PAUSE_IMAGE=$PAUSE_REF
EOF
}

running() {
  local c
  for c in "${COMPONENTS[@]}"; do
    ours "$c" "$(pid_of "$c")" || return 1
  done
  [[ -f "$KUBECONFIG_PATH" ]] && node_ready
}

up() {
  [[ $(id -u) -eq 0 ]] || die "local-cluster.sh up needs root (kubelet, containerd, CNI)"
  [[ -d /sys/fs/cgroup/pids && ! -f /sys/fs/cgroup/cgroup.controllers ]] ||
    die "this script supports cgroup v1 hosts (with a pids hierarchy) only"
  if running; then
    log "cluster already running"
    if [[ -n "${ELECTOR_IMAGES:-}" ]]; then
      CONTAINERD_SOCK="$(sed -n 's/^ELECTOR_CLUSTER_CONTAINERD_SOCK=//p' "$RUN/cluster.env")"
      import_extra_images
    fi
    usage_hint
    return 0
  fi
  local t0 attempt rc other
  t0=$(date +%s)
  if other="$(other_owner)"; then
    die "another local cluster is running on this machine (state $other); stop it first: ELECTOR_CACHE_DIR=$(dirname "$other") hack/local-cluster.sh down"
  fi
  log "cleaning up stale state (if any)"
  down
  apt_install openssl nftables iproute2 curl
  command -v gcc >/dev/null || apt_install gcc libc6-dev
  "$ELECTOR_ROOT/hack/build-binaries.sh" --cluster
  export PATH="$ELECTOR_BIN:$PATH"
  pause_image
  rm -rf "$LOGS"
  # Two attempts: a free port can be taken by someone else between picking it and binding it.
  for attempt in 1 2; do
    set +o errexit
    (
      set -o errexit
      start_cluster
    )
    rc=$?
    set -o errexit
    if [[ $rc -eq 0 ]]; then
      log "cluster up in $(($(date +%s) - t0))s"
      usage_hint
      return 0
    fi
    if [[ $attempt -eq 2 && -n "${ELECTOR_KEEP_ON_FAILURE:-}" ]]; then
      die "up failed; ELECTOR_KEEP_ON_FAILURE is set, so it stays as it is (logs: $LOGS; clean up: hack/local-cluster.sh down)"
    fi
    log "up attempt $attempt failed (exit $rc): tearing down; logs kept in $LOGS/attempt-$attempt"
    down
    mkdir -p "$LOGS/attempt-$attempt"
    mv "$LOGS"/*.log "$LOGS/attempt-$attempt/" 2>/dev/null || true
  done
  die "up failed twice; logs in $LOGS/attempt-*"
}

# start_cluster: one attempt at starting every component (runs in a subshell; `die` ends the attempt).
start_cluster() {
  mkdir -p "$RUN" "$LOGS" "$DATA"
  NODE_IP="$(node_ip)"
  ETCD_PORT="$(free_port)"
  ETCD_PEER_PORT="$(free_port)"
  API_PORT="$(free_port)"
  KCM_PORT="$(free_port)"
  SCHED_PORT="$(free_port)"
  KUBELET_PORT="$(free_port)"
  KUBELET_HEALTHZ_PORT="$(free_port)"
  CONTAINERD_SOCK="$DATA/containerd/containerd.sock"
  log "node $NODE_NAME ip $NODE_IP; ports: apiserver $API_PORT etcd $ETCD_PORT/$ETCD_PEER_PORT kcm $KCM_PORT scheduler $SCHED_PORT kubelet $KUBELET_PORT/$KUBELET_HEALTHZ_PORT"
  echo "$STATE" >"$OWNER_FILE"
  make_pki
  write_configs
  write_env
  mkdir -p "$PIDS_CG"
  [[ -f "$IP_FORWARD_SAVE" ]] || cat /proc/sys/net/ipv4/ip_forward >"$IP_FORWARD_SAVE"

  start etcd "$ELECTOR_BIN/etcd" --name elector --data-dir "$DATA/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "elector=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync --log-level warn
  # containerd does not depend on the control plane: start it early so it is ready by the time the kubelet starts.
  start containerd "$ELECTOR_BIN/containerd" --config "$ETC/containerd.toml"
  wait_for "etcd" 60 curl -fsS "http://127.0.0.1:$ETCD_PORT/health"

  start kube-apiserver "$ELECTOR_BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 0.0.0.0 --secure-port "$API_PORT" --advertise-address "$NODE_IP" \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --client-ca-file "$PKI/ca.crt" \
    --authorization-mode Node,RBAC \
    --enable-admission-plugins NodeRestriction \
    --allow-privileged=true \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$PKI/ca.crt" \
    --kubelet-preferred-address-types InternalIP,Hostname \
    --profiling=false --v 1
  wait_for "kube-apiserver /readyz" 180 kubectl_ get --raw /readyz

  start kube-controller-manager "$ELECTOR_BIN/kube-controller-manager" \
    --kubeconfig "$ETC/kube-controller-manager.kubeconfig" \
    --authentication-kubeconfig "$ETC/kube-controller-manager.kubeconfig" \
    --authorization-kubeconfig "$ETC/kube-controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$KCM_PORT" \
    --use-service-account-credentials \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
    --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --leader-elect=false --profiling=false --v 1
  start kube-scheduler "$ELECTOR_BIN/kube-scheduler" \
    --kubeconfig "$ETC/kube-scheduler.kubeconfig" \
    --authentication-kubeconfig "$ETC/kube-scheduler.kubeconfig" \
    --authorization-kubeconfig "$ETC/kube-scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$SCHED_PORT" \
    --leader-elect=false --profiling=false --v 1

  wait_for "containerd" 60 "$ELECTOR_BIN/ctr" --address "$CONTAINERD_SOCK" version
  import_images
  service_dnat

  start kubelet "$ELECTOR_BIN/kubelet" \
    --config "$ETC/kubelet.yaml" --kubeconfig "$ETC/kubelet.kubeconfig" \
    --root-dir "$DATA/kubelet" --cert-dir "$DATA/kubelet/pki" \
    --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" --v 1
  wait_for "node $NODE_NAME Ready" 180 node_ready
  wait_for "default ServiceAccount" 120 kubectl_ -n default get serviceaccount default
}

usage_hint() {
  cat >&2 <<EOF

Cluster is up (node $NODE_NAME). Use it with:
  export KUBECONFIG=$KUBECONFIG_PATH
  export PATH=$ELECTOR_BIN:\$PATH
  kubectl get nodes
or: eval "\$(hack/local-cluster.sh env)". Logs: $LOGS. Stop with: hack/local-cluster.sh down
EOF
}

status() {
  local c pid rc=0
  for c in "${COMPONENTS[@]}"; do
    pid="$(pid_of "$c")"
    if ours "$c" "$pid"; then
      printf '%-24s running (pid %s)\n' "$c" "$pid"
    else
      printf '%-24s not running\n' "$c"
      rc=1
    fi
  done
  if [[ -f "$RUN/cluster.env" ]]; then
    sed 's/^/  /' "$RUN/cluster.env"
  fi
  if [[ $rc -eq 0 ]]; then
    kubectl_ get nodes -o wide || rc=1
  fi
  return "$rc"
}

env_() {
  echo "export KUBECONFIG=$KUBECONFIG_PATH"
  echo "export PATH=$ELECTOR_BIN:\$PATH"
  if [[ -f "$RUN/cluster.env" ]]; then
    grep -v '^KUBECONFIG=' "$RUN/cluster.env" | sed 's/^/export /'
  fi
}

main() {
  local cmd="${1:-}"
  case "$cmd" in
    up) with_lock "$GLOBAL_LOCK" up ;;
    down)
      with_lock "$GLOBAL_LOCK" down
      log "cluster down"
      ;;
    env) env_ ;;
    status) status ;;
    smoke) exec "$ELECTOR_ROOT/hack/cluster/smoke.sh" ;;
    *)
      sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2
      exit 2
      ;;
  esac
}

main "$@"
