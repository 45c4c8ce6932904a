#!/usr/bin/env bash
# Builds the Kubernetes/etcd/helm (and, with --cluster, node) binaries from the Go module proxy into
# "$CACHE/bin", CACHE=${ELECTOR_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/elector-sidecar}.
#
#   hack/build-binaries.sh               kube-apiserver kubectl etcd helm (enough for envtest: KUBEBUILDER_ASSETS)
#   hack/build-binaries.sh --cluster     additionally kubelet kube-controller-manager kube-scheduler
#                                        containerd containerd-shim-runc-v2 ctr runc(seccomp) cni/{bridge,host-local,loopback,portmap}
#   hack/build-binaries.sh --print-dir   prints the bin dir only (no build)
#   hack/build-binaries.sh NAME...       builds only the named binaries (names as above; "cni" for the CNI plugins)
#
# Each binary is built once: a stamp file per binary ($CACHE/bin/.stamps/NAME) records what it was built
# from, and a binary whose stamp matches is reused. Binaries are built to a temporary name and renamed into
# place, so an interrupted build never leaves a broken binary behind. Go's module and build caches are used
# as usual, so rebuilding is fast. Progress goes to stderr; build logs to $CACHE/logs/.
set -o errexit -o nounset -o pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Bump to force a rebuild of everything when the recipe below changes.
RECIPE=3

# Kubernetes, etcd, containerd and the CNI plugins are built the way the test module's packages are
# compiled by go test and golangci-lint: at the test module's versions of every module both use (their
# wrapper module requires them, see test_pins), with go's default settings (cgo as the default, no
# -trimpath). Then the packages they share (std, k8s.io/api, apimachinery, client-go, kustomize, grpc,
# protobuf, ...) compile once for both: kube-apiserver and kubectl took 1,018 s of CPU with an empty
# cache built on their own (CGO_ENABLED=0 -trimpath, Kubernetes' versions), 543 s once the test module
# was compiled; a cold `make test` compiles the test module first (verify). helm is built in the test
# module itself; runc alone is static (CGO_ENABLED=1 with libseccomp, -extldflags -static).

# Every binary is linked with -w: no DWARF (the symbol table stays, so perf and stack traces still name
# functions). DWARF more than doubled the link of each Kubernetes binary (kube-apiserver: 19 s against
# 7 s, measured): about ten such links in a cold run.

K8S_LDFLAGS="-w -X k8s.io/component-base/version.gitVersion=${K8S_VERSION} -X k8s.io/component-base/version.gitMajor=$(echo "${K8S_VERSION#v}" | cut -d. -f1) -X k8s.io/component-base/version.gitMinor=$(echo "${K8S_VERSION#v}" | cut -d. -f2) -X k8s.io/component-base/version.gitTreeState=clean"
HELM_LDFLAGS="-w -X helm.sh/helm/v4/internal/version.version=${HELM_VERSION} -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
CONTAINERD_LDFLAGS="-w -X github.com/containerd/containerd/v2/version.Version=${CONTAINERD_VERSION}"
CONTAINERD_TAGS="no_btrfs no_devmapper no_zfs no_aufs"
RUNC_TAGS="seccomp netgo osusergo"
RUNC_LDFLAGS="-w -extldflags -static"

K8S_NODE=(kubelet kube-controller-manager kube-scheduler)
CONTAINERD_BINS=(containerd containerd-shim-runc-v2 ctr)
CNI_PLUGINS=(bridge host-local loopback portmap)

STAMPS="$ELECTOR_BIN/.stamps"
LOGS="$ELECTOR_CACHE/logs"
SRC="$ELECTOR_CACHE/src"

usage() {
  sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# spec_of NAME: the string recorded in NAME's stamp; a binary is rebuilt when it changes.
spec_of() {
  case "$1" in
    kube-apiserver | kubectl | kubelet | kube-controller-manager | kube-scheduler)
      echo "recipe=$RECIPE k8s.io/kubernetes@$K8S_VERSION staging@$K8S_STAGING_VERSION cmd/$1 ldflags=$K8S_LDFLAGS pins=$(pins_sum)" ;;
    etcd) echo "recipe=$RECIPE go.etcd.io/etcd/server/v3@$ETCD_VERSION ldflags=-w pins=$(pins_sum)" ;;
    helm) echo "recipe=$RECIPE helm.sh/helm/v4@$HELM_VERSION cmd/helm from test/go.mod ldflags=$HELM_LDFLAGS pins=$(pins_sum)" ;;
    containerd | containerd-shim-runc-v2 | ctr)
      echo "recipe=$RECIPE github.com/containerd/containerd/v2@$CONTAINERD_VERSION cmd/$1 tags=$CONTAINERD_TAGS ldflags=$CONTAINERD_LDFLAGS pins=$(pins_sum)" ;;
    runc) echo "recipe=$RECIPE github.com/opencontainers/runc@$RUNC_VERSION tags=$RUNC_TAGS ldflags=$RUNC_LDFLAGS static" ;;
    cni/*) echo "recipe=$RECIPE github.com/containernetworking/plugins@$CNI_PLUGINS_VERSION $1 ldflags=-w pins=$(pins_sum)" ;;
    *) die "unknown binary $1" ;;
  esac
}

# fresh NAME: true if $BIN/NAME exists, is executable and its stamp matches.
fresh() {
  [[ -x "$ELECTOR_BIN/$1" && -f "$STAMPS/$1" && "$(cat "$STAMPS/$1")" == "$(spec_of "$1")" ]]
}

# install_bin SRCFILE NAME: atomically moves a freshly built binary into place and writes its stamp.
install_bin() {
  local src="$1" name="$2"
  mkdir -p "$(dirname "$ELECTOR_BIN/$name")" "$(dirname "$STAMPS/$name")"
  rm -f "$STAMPS/$name"
  chmod 0755 "$src"
  mv -f "$src" "$ELECTOR_BIN/$name"
  spec_of "$name" >"$STAMPS/$name.tmp"
  mv -f "$STAMPS/$name.tmp" "$STAMPS/$name"
}

# new_tmp: a new temp dir on the bin dir's filesystem (so the final mv is an atomic rename).
TMPDIRS=()
cleanup() {
  local d
  for d in "${TMPDIRS[@]+"${TMPDIRS[@]}"}"; do rm -rf "$d"; done
}
new_tmp() { # sets $out
  out="$(mktemp -d "$ELECTOR_BIN/.build.XXXXXX")"
  TMPDIRS+=("$out")
}

# write_if_changed FILE: replaces FILE with stdin only if the content differs; returns 0 if it changed.
write_if_changed() {
  local f="$1" tmp
  tmp="$(mktemp "$f.XXXXXX")"
  cat >"$tmp"
  if [[ -f "$f" ]] && cmp -s "$tmp" "$f"; then
    rm -f "$tmp"
    return 1
  fi
  mv -f "$tmp" "$f"
  return 0
}

# go_mod_dir MODULE@VERSION: downloads a module (to the module cache) and prints its source dir.
go_mod_dir() {
  local dir
  dir="$(cd / && GOFLAGS=-buildvcs=false go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [[ -n "$dir" && -d "$dir" ]] || die "go mod download $1 failed"
  echo "$dir"
}

# test_pins: "MODULE VERSION" for every module the test module selects (not itself, not the root module it
# replaces); a wrapper module requires each, so that its build selects the same version of every module
# both use (or a newer one where the wrapped module needs it).
TEST_PINS=""
test_pins() {
  if [[ -z "$TEST_PINS" ]]; then
    TEST_PINS="$(GOFLAGS=-mod=readonly GOWORK=off go -C "$ELECTOR_ROOT/test" list -m \
      -f '{{if and (not .Main) (not .Replace)}}{{.Path}} {{.Version}}{{end}}' all | sed '/^$/d')" ||
      die "go list -m all in test/ failed"
  fi
  echo "$TEST_PINS"
}
# pins_sum: a checksum of test_pins, in the stamps of the binaries built with them.
pins_sum() { test_pins | cksum | cut -d' ' -f1; }

# pin_block: the require block of test_pins, for a wrapper's go.mod.
pin_block() {
  echo
  echo "// The test module's versions (test_pins in hack/build-binaries.sh)."
  echo "require ("
  test_pins | sed 's/^/\t/'
  echo ")"
}

# k8s_wrapper: prepares $SRC/kubernetes, a module requiring k8s.io/kubernetes and replacing every staging
# module (derived from k8s.io/kubernetes's own go.mod "=> ./staging/..." lines) with its published version.
k8s_wrapper() {
  local dir="$SRC/kubernetes" gomod goline godebug staging
  mkdir -p "$dir"
  gomod="$(cd / && GOFLAGS=-buildvcs=false go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
  [[ -f "$gomod" ]] || die "cannot download k8s.io/kubernetes@$K8S_VERSION go.mod"
  goline="$(grep -m1 '^go ' "$gomod")"
  godebug="$(grep '^godebug ' "$gomod" || true)"
  staging="$(awk '$2 == "=>" && $3 ~ /^\.\/staging\// { print $1 }' "$gomod" | sort -u)"
  [[ -n "$staging" ]] || die "no staging replace lines found in $gomod"
  log "kubernetes wrapper: replacing $(echo "$staging" | wc -l) staging modules with $K8S_STAGING_VERSION"
  {
    echo "// Generated by hack/build-binaries.sh; builds k8s.io/kubernetes $K8S_VERSION commands from the module proxy."
    echo "module elector-sidecar.local/kubernetes-build"
    echo
    echo "$goline"
    [[ -n "$godebug" ]] && printf '\n%s\n' "$godebug"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    pin_block
    echo
    echo "replace ("
    local m
    for m in $staging; do echo "	$m => $m $K8S_STAGING_VERSION"; done
    echo ")"
  } | write_if_changed "$dir/go.mod.in" || true
  # go.mod is go.mod.in plus what the go command adds; regenerate it when the template changed.
  if [[ ! -f "$dir/go.mod" || "$dir/go.mod.in" -nt "$dir/go.mod.stamp" ]]; then
    cp "$dir/go.mod.in" "$dir/go.mod"
    rm -f "$dir/go.sum"
    touch "$dir/go.mod.stamp"
  fi
  cat >"$dir/README" <<EOF
Wrapper module generated by hack/build-binaries.sh (elector-sidecar). Safe to delete.
EOF
  echo "$dir"
}

# simple_wrapper NAME MODULE VERSION: prepares $SRC/NAME, a module that requires MODULE@VERSION (and
# test_pins).
simple_wrapper() {
  local name="$1" mod="$2" ver="$3" dir="$SRC/$1" goline gomod
  mkdir -p "$dir"
  gomod="$(cd / && GOFLAGS=-buildvcs=false go mod download -json "$mod@$ver" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
  [[ -f "$gomod" ]] || die "cannot download $mod@$ver"
  goline="$(grep -m1 '^go ' "$gomod")"
  {
    printf '// Generated by hack/build-binaries.sh.\nmodule elector-sidecar.local/%s-build\n\n%s\n\nrequire %s %s\n' \
      "$name" "$goline" "$mod" "$ver"
    pin_block
  } | write_if_changed "$dir/go.mod.in" || true
  if [[ ! -f "$dir/go.mod" || "$dir/go.mod.in" -nt "$dir/go.mod.stamp" ]]; then
    cp "$dir/go.mod.in" "$dir/go.mod"
    rm -f "$dir/go.sum"
    touch "$dir/go.mod.stamp"
  fi
  echo "$dir"
}

# wrapper_build DIR LOGNAME OUT LDFLAGS [BUILDFLAG...] PKG...: go build inside a wrapper module (-o OUT: a dir
# ending in / or a file), adding requirements and go.sum entries as needed; go's default settings, as go
# test's (see RECIPE).
wrapper_build() {
  local dir="$1" logname="$2" out="$3" ldflags="$4"
  shift 4
  (cd "$dir" && GOFLAGS="-mod=mod -buildvcs=false" GOWORK=off \
    run_logged "go build $logname" "$LOGS/build-$logname.log" \
    go build -mod=mod -ldflags "$ldflags" -o "$out" "$@")
}

build_k8s() {
  local want=() n
  for n in "$@"; do fresh "$n" || want+=("$n"); done
  [[ ${#want[@]} -eq 0 ]] && return 0
  local dir out pkgs=()
  dir="$(k8s_wrapper)"
  for n in "${want[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$n"); done
  new_tmp
  log "building ${want[*]} (k8s.io/kubernetes $K8S_VERSION; cold: about 4 min for kube-apiserver, 2-3 min for the node set)"
  wrapper_build "$dir" "$(IFS=-; echo "k8s-${want[*]}")" "$out/" "$K8S_LDFLAGS" "${pkgs[@]}"
  for n in "${want[@]}"; do install_bin "$out/$n" "$n"; done
}

build_etcd() {
  fresh etcd && return 0
  local dir out
  dir="$(simple_wrapper etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION")"
  new_tmp
  wrapper_build "$dir" etcd "$out/etcd" "-w" go.etcd.io/etcd/server/v3
  install_bin "$out/etcd" etcd
}

# helm is built in the test module (test/go.mod: `tool helm.sh/helm/v4/cmd/helm`), whose chart tests link
# the Helm SDK at the same versions: built with go test's own settings (cgo as the default, no -trimpath),
# the packages both use are compiled once for both (cold: 193 s for helm alone in a wrapper module; 11 s
# once the test module is compiled, as golangci-lint has by then).
build_helm() {
  fresh helm && return 0
  local have out
  have="$(go -C "$ELECTOR_ROOT/test" list -m -f '{{.Version}}' helm.sh/helm/v4)"
  [[ "$have" == "$HELM_VERSION" ]] ||
    die "test/go.mod requires helm.sh/helm/v4 $have, hack/lib.sh says HELM_VERSION=$HELM_VERSION: make them agree"
  new_tmp
  (cd "$ELECTOR_ROOT/test" && GOFLAGS=-buildvcs=false GOWORK=off \
    run_logged "go build helm" "$LOGS/build-helm.log" \
    go build -ldflags "$HELM_LDFLAGS" -o "$out/helm" helm.sh/helm/v4/cmd/helm)
  install_bin "$out/helm" helm
}

build_containerd() {
  local want=() n
  for n in "${CONTAINERD_BINS[@]}"; do fresh "$n" || want+=("$n"); done
  [[ ${#want[@]} -eq 0 ]] && return 0
  local dir out pkgs=()
  for n in "${want[@]}"; do pkgs+=("github.com/containerd/containerd/v2/cmd/$n"); done
  dir="$(simple_wrapper containerd github.com/containerd/containerd/v2 "$CONTAINERD_VERSION")"
  new_tmp
  wrapper_build "$dir" containerd "$out/" "$CONTAINERD_LDFLAGS" -tags "$CONTAINERD_TAGS" "${pkgs[@]}"
  for n in "${want[@]}"; do install_bin "$out/$n" "$n"; done
}

build_runc() {
  fresh runc && return 0
  "$ELECTOR_ROOT/hack/install-deps.sh" cluster # libseccomp-dev, pkg-config (runc with seccomp)
  local out
  new_tmp
  (cd / && GOBIN="$out" GOFLAGS=-buildvcs=false GOWORK=off CGO_ENABLED=1 \
    run_logged "go install runc (seccomp)" "$LOGS/build-runc.log" \
    go install -trimpath -tags "$RUNC_TAGS" -ldflags "$RUNC_LDFLAGS" "github.com/opencontainers/runc@$RUNC_VERSION")
  install_bin "$out/runc" runc
}

build_cni() {
  local want=() p
  for p in "${CNI_PLUGINS[@]}"; do fresh "cni/$p" || want+=("$p"); done
  [[ ${#want[@]} -eq 0 ]] && return 0
  local dir out pkgs=() base="github.com/containernetworking/plugins/plugins"
  for p in "${want[@]}"; do
    case "$p" in
      host-local) pkgs+=("$base/ipam/$p") ;;
      portmap) pkgs+=("$base/meta/$p") ;;
      *) pkgs+=("$base/main/$p") ;;
    esac
  done
  dir="$(simple_wrapper cni github.com/containernetworking/plugins "$CNI_PLUGINS_VERSION")"
  new_tmp
  wrapper_build "$dir" cni "$out/" -w "${pkgs[@]}"
  for p in "${want[@]}"; do install_bin "$out/$p" "cni/$p"; done
}

main() {
  local targets=() a
  for a in "$@"; do
    case "$a" in
      --print-dir) echo "$ELECTOR_BIN"; return 0 ;;
      --cluster) targets+=(kube-apiserver kubectl etcd helm "${K8S_NODE[@]}" containerd runc cni) ;;
      -h | --help) usage ;;
      -*) usage ;;
      *) targets+=("$a") ;;
    esac
  done
  [[ ${#targets[@]} -eq 0 ]] && targets=(kube-apiserver kubectl etcd helm)

  command -v go >/dev/null || die "go is not on PATH"
  mkdir -p "$ELECTOR_BIN" "$STAMPS" "$LOGS" "$SRC"
  test_pins >/dev/null # once, here: the stamps (spec_of) and the wrappers use it
  # Nothing to build: no lock. (install_bin writes a stamp only after its binary is in place, so a matching
  # stamp means a complete binary, even while another run holds the lock to build something else: e.g.
  # hack/test.sh's background build of the e2e tier's binaries while the integration tier needs these.)
  if all_fresh "${targets[@]}"; then
    log "binaries ready in $ELECTOR_BIN (all up to date)"
    return 0
  fi
  # Hold the build lock while building (serialises concurrent runs). While another run holds it, check
  # now and then whether it has built what we want: its lock may be held a long while yet for others.
  # The holder writes its process group to .build.owner: a waiter raises the holder's CPU priority to its
  # own (hack/test.sh's background build runs at nice 19 and would otherwise crawl on a busy machine while
  # a tier waits for it; only root may raise a priority, otherwise the holder keeps its own).
  (
    exec 9>"$ELECTOR_CACHE/.build.lock"
    local waiting="" boosted="" owner mine
    mine="$(nice)"
    until flock -n 9; do
      if all_fresh "${targets[@]}"; then
        log "binaries ready in $ELECTOR_BIN (built by the run that holds the lock)"
        exit 0
      fi
      [[ -n "$waiting" ]] || log "waiting for lock $ELECTOR_CACHE/.build.lock (held by another run of this script)"
      waiting=1
      owner="$(cat "$ELECTOR_CACHE/.build.owner" 2>/dev/null || true)"
      if [[ -z "$boosted" && "$owner" =~ ^[0-9]+$ ]] &&
        [[ "$(ps -o ni= -p "$owner" 2>/dev/null | tr -d ' ')" -gt "$mine" ]] 2>/dev/null &&
        renice -n "$mine" -g "$owner" >/dev/null 2>&1; then
        log "raised the lock holder's CPU priority (process group $owner) to ours (nice $mine) while we wait"
        boosted=1
      fi
      sleep 2
    done
    ps -o pgid= -p "$BASHPID" | tr -d ' ' >"$ELECTOR_CACHE/.build.owner"
    build_targets "${targets[@]}"
    log "binaries ready in $ELECTOR_BIN"
  )
}

# all_fresh TARGET...: every binary that build_targets would build for these targets is fresh.
all_fresh() {
  local t n
  for t in "$@"; do
    case "$t" in
      containerd | containerd-shim-runc-v2 | ctr)
        for n in "${CONTAINERD_BINS[@]}"; do fresh "$n" || return 1; done ;;
      cni)
        for n in "${CNI_PLUGINS[@]}"; do fresh "cni/$n" || return 1; done ;;
      kube-apiserver | kubectl | kubelet | kube-controller-manager | kube-scheduler | etcd | helm | runc)
        fresh "$t" || return 1 ;;
      *) return 1 ;; # unknown: build_targets reports it
    esac
  done
}

build_targets() { # runs under the build lock, in a subshell (main)
  local k8s=() t
  trap cleanup EXIT
  rm -rf "$ELECTOR_BIN"/.build.* # leftovers of killed builds
  declare -A seen=()
  for t in "$@"; do
    [[ -n "${seen[$t]:-}" ]] && continue
    case "$t" in
      kube-apiserver | kubectl | kubelet | kube-controller-manager | kube-scheduler) k8s+=("$t") ;;
      etcd | helm | containerd | containerd-shim-runc-v2 | ctr | runc | cni) ;;
      *) die "unknown binary $t (see --help)" ;;
    esac
    seen[$t]=1
  done
  # All Kubernetes commands in one go build: they share most packages.
  if [[ ${#k8s[@]} -gt 0 ]]; then build_k8s "${k8s[@]}"; fi
  if [[ -n "${seen[etcd]:-}" ]]; then build_etcd; fi
  if [[ -n "${seen[helm]:-}" ]]; then build_helm; fi
  if [[ -n "${seen[containerd]:-}${seen[containerd-shim-runc-v2]:-}${seen[ctr]:-}" ]]; then build_containerd; fi
  if [[ -n "${seen[runc]:-}" ]]; then build_runc; fi
  if [[ -n "${seen[cni]:-}" ]]; then build_cni; fi
}

main "$@"
