#!/usr/bin/env bash
# The README's test command (`make test`), and what CI runs (.ci/run).
#
# Tiers, in order; each needs what the one before it built:
#   verify       gofmt, golangci-lint (with go vet as its govet) of every Go module, shellcheck of every script
#   unit         go test of the root module (pkg/, internal/, cmd/, examples/: fake clientset, httptest),
#                of the test module's harness and programs (test/framework, test/cmd) and the tool modules
#   integration  real etcd + kube-apiserver (built once into the cache by hack/build-binaries.sh), all in
#                the test module (test/go.mod): multi-process election tests (test/integration), the fences
#                (test/fences), the examples (test/examples) and chart/config tests (test/chart)
#   e2e          a local single-node cluster with a real kubelet and containerd
#                (hack/local-cluster.sh), the chart installed with helm, test/e2e (build tag e2e)
#
#   hack/test.sh [TIER...]     default: all tiers
#   ELECTOR_TEST_TIERS="unit integration" hack/test.sh   same as naming them
set -o errexit -o nounset -o pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ELECTOR_ROOT"

command -v go >/dev/null || die "go is not installed (need the version in go.mod)"

tiers=("$@")
if [[ ${#tiers[@]} -eq 0 ]]; then
  read -r -a tiers <<<"${ELECTOR_TEST_TIERS:-verify unit integration e2e}"
fi

# Go's own closing lines ("ok", "FAIL") are what CI reads; -count=1 defeats the test cache so a
# green run means the tests ran. -vet=off: go test's own vet runs a subset (printf, tests, ...) of the
# analyzers that the verify tier's golangci-lint runs as govet on every module, and it computed their
# facts for every dependency again, in every configuration (race, fuzz, e2e): ~40 s of the unit tier and
# ~75 s of the integration tier's compile on 2 cores with an empty vet cache (2026-12-06).
GOTEST=(go test -count=1 -vet=off)
GOTEST_IN_TEST=(go -C test test -count=1 -vet=off) # the test module (test/go.mod)

# timed CMD...: runs CMD, then logs how long it took, so that a run's log shows where its time went.
timed() {
  local start
  start=$(date +%s)
  "$@"
  log "$(($(date +%s) - start))s: $*"
}

tier_verify() {
  hack/verify.sh
}

tier_unit() {
  # test/framework/dbserver's own test starts a real PostgreSQL and redis-server.
  hack/install-deps.sh
  # The shard simulator runs its members in one goroutine (pkg/shards/simworld_test.go): nothing there
  # for the race detector, which made it ~6x slower (~60 s of CPU); it runs once, without, below.
  timed "${GOTEST[@]}" -race -skip '^TestShardSimulation(Findings)?$' ./...
  # The deterministic simulators (docs/simulation.md), without the race detector: the election's seeds
  # 1-2000 (~15 s on 2 cores), the shard set's default seeds and its findings.
  timed "${GOTEST[@]}" -run '^TestSimulation$' ./pkg/election -sim.seeds=2000
  timed "${GOTEST[@]}" -run '^TestShardSimulation(Findings)?$' ./pkg/shards
  # The test module's own unit tests: the harness, the test programs (bench, demo, chaos, ...), the local
  # cluster's steps (test/localcluster).
  timed "${GOTEST_IN_TEST[@]}" -race ./framework/... ./cmd/... ./localcluster/...
  # A short fuzz run of the local API handler (single Lease and shard set) and of the flag/env parsing, from the seed corpora in
  # testdata/fuzz; a crasher found here is written there and becomes a regular test case. A fixed
  # number of executions (seconds here), not -fuzztime=<duration>: Go 1.26's coordinator can fail a
  # duration-bounded run with "context deadline exceeded" as the time runs out (go.dev/issue/75804).
  # Fuzzing instruments every package the test binary links: -tags elector_fuzz leaves out the test
  # files that link client-go's typed clientset (every API group; //go:build !elector_fuzz), which
  # the fuzz targets do not use.
  timed "${GOTEST[@]}" -tags elector_fuzz -run='^$' -fuzz='^FuzzHandler$' -fuzztime=20000x ./pkg/localapi
  timed "${GOTEST[@]}" -tags elector_fuzz -run='^$' -fuzz='^FuzzShardsHandler$' -fuzztime=20000x ./pkg/localapi
  timed "${GOTEST[@]}" -tags elector_fuzz -run='^$' -fuzz='^FuzzParse$' -fuzztime=20000x ./internal/sidecar
  timed go -C hack/tools test -count=1 -vet=off ./...
}

tier_integration() {
  # PostgreSQL and redis-server for the fences (test/fences), installed only when missing.
  hack/install-deps.sh
  timed hack/build-binaries.sh
  KUBEBUILDER_ASSETS="$(hack/build-binaries.sh --print-dir)"
  export KUBEBUILDER_ASSETS
  # The binaries were just built: a test that cannot find one fails instead of skipping (test/chart).
  export ELECTOR_REQUIRE_APISERVER=1
  # Every package of this tier is in the test module (test/go.mod), and one go test runs them all: it runs
  # two test binaries at a time (-p is the number of cores), so the fences, the examples (Go, Python and
  # shell workers against a real sidecar and PostgreSQL) and the chart and config/ tests (make test-chart)
  # run beside test/integration, whose ~10 minutes mostly wait on election timings, instead of after it.
  # Each package starts its own control plane.
  timed integration_packages
}

# integration_packages: the integration tier's go test, its -v output cut down by go_test_summary.
integration_packages() {
  "${GOTEST_IN_TEST[@]}" -timeout 20m -v ./integration/... ./fences/... ./examples/... ./chart/... 2>&1 | go_test_summary
}

tier_e2e() {
  hack/e2e.sh
}

# The background build. The integration tier needs kube-apiserver, kubectl, etcd and helm, the e2e tier
# also kubelet, containerd, runc, ... (hack/build-binaries.sh; cold, the biggest compile of the run on
# 2 cores). When a tier that needs them is not the first tier of this run, they are built in the
# background from the start, at the lowest CPU priority (nice 19), so that they take only the CPU the
# tiers before leave idle (the test runs of the integration tier mostly wait). It only fills the cache:
# each tier still runs hack/build-binaries.sh itself, which reuses what is fresh, waits for the
# background build's lock if it is building what the tier needs, and builds (and fails) in the
# foreground whatever the background build did not finish, so results do not depend on it.
# ELECTOR_PREBUILD=0 turns it off.
prebuild_pid=""
prebuild_log="$ELECTOR_CACHE/logs/prebuild.log"

start_prebuild() {
  local sets=() t first="${tiers[0]}"
  for t in "${tiers[@]}"; do
    [[ "$t" == "$first" ]] && continue
    case "$t" in
      integration) [[ " ${sets[*]-} " == *" control-plane "* ]] || sets+=(control-plane) ;;
      e2e)
        [[ " ${sets[*]-} " == *" control-plane "* ]] || sets+=(control-plane)
        sets+=(cluster)
        ;;
    esac
  done
  [[ ${#sets[@]} -gt 0 && "${ELECTOR_PREBUILD:-1}" != 0 ]] || return 0
  # Host packages first, in the foreground: the background's runc build asks hack/install-deps.sh for
  # libseccomp-dev, and two apt-get runs at once would fail on dpkg's lock.
  hack/install-deps.sh
  mkdir -p "$(dirname "$prebuild_log")"
  # Its own process group (set -m), so that stop_prebuild can stop everything it started; not its own
  # session (setsid): with the kernel's autogroup scheduling, a new session gets an equal share of the
  # CPU whatever its nice value.
  set -m
  # Each step starts at nice 19 again: a tier that waits for a step raises that step's priority (see
  # hack/build-binaries.sh), and the next step must not keep it.
  # shellcheck disable=SC2016 # expanded by the inner bash
  nice -n 19 bash -c 'set -o errexit; for s in "$@"; do
      renice -n 19 -p $$ >/dev/null 2>&1 || true
      if [[ $s == cluster ]]; then a=(--cluster); else a=(); fi
      echo "+ hack/build-binaries.sh ${a[*]}"; hack/build-binaries.sh "${a[@]}"; done' \
    prebuild "${sets[@]}" </dev/null >"$prebuild_log" 2>&1 &
  prebuild_pid=$!
  set +m
  log "background build (nice 19) of the ${sets[*]} binaries: pid $prebuild_pid, log $prebuild_log"
}

# stop_prebuild: stops the background build if it is still running (on exit: a failed tier, a signal).
stop_prebuild() {
  [[ -n "$prebuild_pid" ]] || return 0
  if kill -0 "$prebuild_pid" 2>/dev/null; then
    log "stopping the background build (process group $prebuild_pid)"
    kill -TERM -- "-$prebuild_pid" 2>/dev/null || true
  fi
  wait "$prebuild_pid" 2>/dev/null || true
  prebuild_pid=""
}

# finish_prebuild: waits for the background build at the end of a passing run and reports its outcome.
# A failure there is not the run's failure (the tiers built what they needed themselves), but it is shown.
finish_prebuild() {
  [[ -n "$prebuild_pid" ]] || return 0
  local rc=0
  wait "$prebuild_pid" || rc=$?
  prebuild_pid=""
  if [[ $rc -ne 0 ]]; then
    log "WARNING: the background build failed (exit $rc; the tiers built what they needed); last lines of $prebuild_log:"
    tail -n 20 "$prebuild_log" >&2 || true
  fi
}

# go_test_summary: `go test -v` output, cut down: a test that passes shows its start, its end and the
# first line of each of its log messages; a test that fails (or never ends: a panic, a timeout) shows
# everything it printed, continuation lines included (a violation list, the processes' logs). Lines
# outside any test pass through. Each test's lines are held until it ends (top-level tests by name, so
# parallel ones do not mix).
go_test_summary() {
  awk '
    function brief(l) {
      return l ~ /^(=== RUN|--- |[ \t]+--- |PASS|FAIL|ok |panic)/ || l ~ /^[ \t]+[^ \t]+_test\.go:[0-9]+:/
    }
    function show(name, all,   n, i, ls) {
      n = split(held[name], ls, "\n")
      for (i = 1; i < n; i++) if (all || brief(ls[i])) print ls[i]
      delete held[name]
    }
    function showAll(   name, names, n, i) {
      n = 0
      for (name in held) names[++n] = name
      for (i = 1; i <= n; i++) show(names[i], 1)
    }
    function top(s) { sub(/\/.*/, "", s); return s }
    /^=== (RUN|CONT|PAUSE|NAME) +/ { cur = top($3); held[cur] = held[cur] $0 "\n"; next }
    /^--- (PASS|FAIL|SKIP): / {
      name = top($3); show(name, $2 == "FAIL:"); print; fflush()
      if (name == cur) cur = ""
      next
    }
    /^(PASS|FAIL|ok  |\?   )/ { showAll(); cur = ""; print; fflush(); next }
    cur != "" { held[cur] = held[cur] $0 "\n"; next }
    { print; fflush() }
    END { showAll() }
  '
}

for tier in "${tiers[@]}"; do
  case "$tier" in
    verify | unit | integration | e2e) ;;
    *) die "unknown tier '$tier' (want verify, unit, integration or e2e)" ;;
  esac
done

trap stop_prebuild EXIT
trap 'log "interrupted"; exit 130' INT
trap 'log "terminated"; exit 143' TERM
start_prebuild

for tier in "${tiers[@]}"; do
  start=$(date +%s)
  log "tier $tier: start"
  "tier_$tier"
  log "tier $tier: passed in $(($(date +%s) - start))s"
done
finish_prebuild
log "all tiers passed: ${tiers[*]}"
