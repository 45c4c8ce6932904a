package main

// --shards=N: the baseline of the bench's shards section. client-go has no
// shard set, so the only way to own a fair share of N partitions with it
// today is one leaderelection.LeaderElector per partition's Lease, each
// renewing on its own: this runs N of them in one process, on the Leases
// <lease-name>-0 … <lease-name>-(N-1) (the names elector-sidecar's
// --shards gives a set's shard Leases), all on one client (one connection,
// the process's --kube-api-qps/--kube-api-burst). Each elector is built as
// the single-Lease mode builds its one (ReleaseOnCancel, client timeout
// renewDeadline/2, run again after a lost term) and, like it, reads its
// token (the Lease's leaseTransitions) with one GET after acquiring.
//
//	GET /shards  200 {"set":"ns/name","identity":"...","shards":N,"owned":[{"index":i,"lease":"ns/name-i","token":T},...]}
//	             with an ETag; ?wait=D with If-None-Match: a long-poll, answered as soon as
//	             the owned shards change, or 304 after D (as elector-sidecar's /leader?wait=)
//	GET /healthz 200
//
// SIGTERM: every elector releases its Lease (ReleaseOnCancel), then the
// process exits 0. client-go has no rebalancing: a member that joins holds
// only the shards that are free when its electors try them.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os/signal"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// maxShardsWait caps GET /shards?wait=, as elector-sidecar caps /leader's.
const maxShardsWait = 5 * time.Minute

// ownedShard is one entry of GET /shards' "owned".
type ownedShard struct {
	Index int    `json:"index"`
	Lease string `json:"lease"` // namespace/name, as elector-sidecar's
	Token int64  `json:"token"`
}

// shardsBody is GET /shards' answer.
type shardsBody struct {
	Set      string       `json:"set"`
	Identity string       `json:"identity"`
	Shards   int          `json:"shards"`
	Owned    []ownedShard `json:"owned"`
}

// shardTable is what this process serves: the shards its electors lead,
// with a version that changes with them (the ETag) and a channel closed on
// every change (the long-poll's wake-up).
type shardTable struct {
	mu      sync.Mutex
	owned   map[int]int64 // index -> token
	version uint64
	changed chan struct{}
}

func newShardTable() *shardTable {
	return &shardTable{owned: map[int]int64{}, changed: make(chan struct{})}
}

// set records that shard i is led with token (held) or not.
func (t *shardTable) set(i int, token int64, held bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old, had := t.owned[i]
	if held == had && (!held || old == token) {
		return
	}
	if held {
		t.owned[i] = token
	} else {
		delete(t.owned, i)
	}
	t.version++
	close(t.changed)
	t.changed = make(chan struct{})
}

// snapshot returns the owned shards by index, the ETag and the channel
// closed on the next change.
func (t *shardTable) snapshot() (map[int]int64, string, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	cp := make(map[int]int64, len(t.owned))
	for i, tok := range t.owned {
		cp[i] = tok
	}
	return cp, `"` + strconv.FormatUint(t.version, 10) + `"`, t.changed
}

// serveShards is GET /shards.
func serveShards(t *shardTable, set, identity string, n int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var wait time.Duration
		if v := r.URL.Query().Get("wait"); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 || d > maxShardsWait {
				writeJSON(w, http.StatusBadRequest, map[string]any{"error": fmt.Sprintf("query parameter wait: %q is not a duration from 0 to %v", v, maxShardsWait)})
				return
			}
			wait = d
		}
		match := r.Header.Get("If-None-Match")
		owned, etag, ch := t.snapshot()
		if wait > 0 && match == etag {
			timer := time.NewTimer(wait)
			defer timer.Stop()
			select {
			case <-ch:
				owned, etag, _ = t.snapshot()
			case <-timer.C:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("ETag", etag)
		w.Header().Set("Cache-Control", "no-store")
		if match == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		body := shardsBody{Set: set, Identity: identity, Shards: n, Owned: make([]ownedShard, 0, len(owned))}
		for i, tok := range owned {
			body.Owned = append(body.Owned, ownedShard{Index: i, Lease: set + "-" + strconv.Itoa(i), Token: tok})
		}
		sort.Slice(body.Owned, func(a, b int) bool { return body.Owned[a].Index < body.Owned[b].Index })
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_ = json.NewEncoder(w).Encode(body)
	}
}

// runShards runs one elector per shard Lease until ctx ends, then waits
// until every one has released its Lease and returned. An error: the
// timings are not valid for an elector (checked once, before any starts).
func runShards(ctx context.Context, o *options, client kubernetes.Interface, t *shardTable, logger *log.Logger) error {
	if _, err := leaderelection.NewLeaderElector(electorConfig(o, nil, "", leaderelection.LeaderCallbacks{
		OnStartedLeading: func(context.Context) {}, OnStoppedLeading: func() {},
	})); err != nil {
		return fmt.Errorf("leader elector: %w", err)
	}
	var wg sync.WaitGroup
	for i := 0; i < o.shards; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runShard(ctx, o, client, t, i)
		}()
	}
	logger.Printf("started %d electors, one per shard Lease %s-0 … %s-%d", o.shards, o.leaseName, o.leaseName, o.shards-1)
	wg.Wait()
	return nil
}

// readToken reads the Lease's leaseTransitions, the shard's token, trying
// again until it has it or ctx ends: under 1,000 electors per process a
// GET may time out, and a shard is not worked on without its token (the
// single-Lease mode serves 0 then; a shard set would serve a token its
// Lease never had).
func readToken(ctx context.Context, client kubernetes.Interface, ns, name string) (int64, bool) {
	for ctx.Err() == nil {
		// Bounded by the client's timeout (renewDeadline/2, as run sets it).
		l, err := client.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && l.Spec.LeaseTransitions != nil {
			return int64(*l.Spec.LeaseTransitions), true
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	return 0, false
}

// electorConfig is a shard's elector: the single-Lease mode's settings on lock.
func electorConfig(o *options, lock resourcelock.Interface, name string, cb leaderelection.LeaderCallbacks) leaderelection.LeaderElectionConfig {
	if lock == nil {
		lock = &resourcelock.LeaseLock{LockConfig: resourcelock.ResourceLockConfig{Identity: o.identity}}
	}
	return leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   o.leaseDuration,
		RenewDeadline:   o.renewDeadline,
		RetryPeriod:     o.retryPeriod,
		ReleaseOnCancel: o.releaseOnCancel,
		Name:            o.namespace + "/" + name,
		Callbacks:       cb,
	}
}

// runShard is shard i's elector: the single-Lease mode's loop on Lease
// <lease-name>-i, recording its term in t.
func runShard(ctx context.Context, o *options, client kubernetes.Interface, t *shardTable, i int) {
	name := o.leaseName + "-" + strconv.Itoa(i)
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: name, Namespace: o.namespace},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: o.identity},
	}
	var (
		mu    sync.Mutex
		round int
	)
	for ctx.Err() == nil {
		mu.Lock()
		round++
		mine := round
		mu.Unlock()
		le, err := leaderelection.NewLeaderElector(electorConfig(o, lock, name, leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				tok, ok := readToken(ctx, client, o.namespace, name)
				if !ok {
					return // the term ended first
				}
				mu.Lock()
				if ctx.Err() == nil && mine == round {
					t.set(i, tok, true)
				}
				mu.Unlock()
				<-ctx.Done()
				mu.Lock()
				if mine == round {
					t.set(i, 0, false)
				}
				mu.Unlock()
			},
			OnStoppedLeading: func() {},
		}))
		if err != nil {
			return // runShards checked this config before starting any
		}
		le.Run(ctx)
		t.set(i, 0, false)
	}
}

// runShardsServer is run's --shards mode: GET /shards and the electors,
// until SIGTERM or SIGINT.
func runShardsServer(o *options, client kubernetes.Interface, ln net.Listener, mux *http.ServeMux, logger *log.Logger) error {
	// client-go logs every elector's attempts: N electors would flood the log.
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
	t := newShardTable()
	mux.HandleFunc("GET /shards", serveShards(t, o.namespace+"/"+o.leaseName, o.identity, o.shards))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	logger.Printf("starting set=%s/%s shards=%d leaseDuration=%v renewDeadline=%v retryPeriod=%v", o.namespace, o.leaseName, o.shards, o.leaseDuration, o.renewDeadline, o.retryPeriod)
	err := runShards(ctx, o, client, t, logger)
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	logger.Printf("stopped")
	return err
}
