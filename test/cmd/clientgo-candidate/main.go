// Command clientgo-candidate is the baseline: a plain client-go
// leaderelection.LeaderElector on a LeaseLock (ReleaseOnCancel), serving the
// subset of elector-sidecar's local API that tests need to tell holders apart:
//
//	GET /leader  200 {"isLeader":bool,"holder":"...","identity":"...","lease":"ns/name","leaseTransitions":N}
//	GET /token   200 {"token":N,"lease":"ns/name"} while leading (N = the Lease's
//	             leaseTransitions read right after acquiring), else 409 {"error":"...","holder":"..."}
//	GET /healthz 200
//
// Flags mirror elector-sidecar's: --lease-name, --lease-namespace, --identity,
// --kubeconfig, --lease-duration, --renew-deadline, --retry-period,
// --http-address, --kube-api-qps, --kube-api-burst (client-go's defaults, 5
// and 10, unless set; a negative QPS turns the client-side limit off), plus
// --release-on-cancel (default true). SIGTERM/SIGINT: releases the Lease and
// exits 0. Bad flags: exit 2. --shards=N runs one elector per shard Lease
// instead (shards.go: the baseline of the bench's shards section).
//
// "Leading" is client-go's own notion: from OnStartedLeading to
// OnStoppedLeading. client-go does not bound it by the lease's expiry, which
// is the point of comparing against it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

type options struct {
	leaseName, namespace, identity, kubeconfig, httpAddress string
	leaseDuration, renewDeadline, retryPeriod               time.Duration
	releaseOnCancel                                         bool
	// shards > 0: one elector per Lease <leaseName>-0 … -(shards-1).
	shards     int
	kubeAPIQPS float64
	kubeBurst  int
}

func parse(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("clientgo-candidate", flag.ContinueOnError)
	fs.StringVar(&o.leaseName, "lease-name", "", "Lease name (required)")
	fs.StringVar(&o.namespace, "lease-namespace", "default", "Lease namespace")
	host, _ := os.Hostname()
	fs.StringVar(&o.identity, "identity", host, "holder identity")
	fs.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file")
	fs.StringVar(&o.httpAddress, "http-address", "127.0.0.1:4040", "local API address")
	fs.DurationVar(&o.leaseDuration, "lease-duration", 15*time.Second, "lease duration")
	fs.DurationVar(&o.renewDeadline, "renew-deadline", 10*time.Second, "renew deadline")
	fs.DurationVar(&o.retryPeriod, "retry-period", 2*time.Second, "retry period")
	fs.BoolVar(&o.releaseOnCancel, "release-on-cancel", true, "release the Lease on SIGTERM")
	fs.IntVar(&o.shards, "shards", 0, "run one elector per Lease <lease-name>-0 … <lease-name>-(N-1) and serve GET /shards (0: one elector on --lease-name)")
	fs.Float64Var(&o.kubeAPIQPS, "kube-api-qps", 0, "client-side QPS limit to the API server (0: client-go's default, 5; negative: no limit)")
	fs.IntVar(&o.kubeBurst, "kube-api-burst", 0, "client-side burst to the API server (0: client-go's default, 10)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if o.shards < 0 {
		return nil, fmt.Errorf("--shards %d: must be 0 (one Lease) or a number of shards", o.shards)
	}
	if o.kubeBurst < 0 {
		return nil, fmt.Errorf("--kube-api-burst %d: must not be negative", o.kubeBurst)
	}
	if o.leaseName == "" {
		return nil, errors.New("--lease-name is required")
	}
	if o.identity == "" {
		return nil, errors.New("--identity is required")
	}
	return o, nil
}

type state struct {
	leading atomic.Bool
	token   atomic.Int64
	mu      sync.Mutex
	le      *leaderelection.LeaderElector
	round   int // guarded by mu: which Run the callbacks belong to
}

func (s *state) elector() *leaderelection.LeaderElector {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.le
}

func main() {
	o, err := parse(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "clientgo-candidate:", err)
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "clientgo-candidate:", err)
		os.Exit(1)
	}
}

func run(o *options) error {
	klog.SetOutput(os.Stderr)
	logger := log.New(os.Stdout, o.identity+" ", log.LstdFlags|log.Lmicroseconds)
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("client config: %w", err)
	}
	// As client-go recommends: a hung request must not outlive the renew deadline.
	cfg.Timeout = max(time.Second, o.renewDeadline/2)
	cfg.QPS, cfg.Burst = float32(o.kubeAPIQPS), o.kubeBurst
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: o.leaseName, Namespace: o.namespace},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: o.identity},
	}
	st := &state{}
	lease := o.namespace + "/" + o.leaseName

	ln, err := net.Listen("tcp", o.httpAddress)
	if err != nil {
		return fmt.Errorf("listen %s: %w", o.httpAddress, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	if o.shards > 0 {
		return runShardsServer(o, client, ln, mux, logger)
	}
	mux.HandleFunc("GET /leader", func(w http.ResponseWriter, r *http.Request) {
		holder := ""
		if le := st.elector(); le != nil {
			holder = le.GetLeader()
		}
		var transitions int64
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		if l, err := client.CoordinationV1().Leases(o.namespace).Get(ctx, o.leaseName, metav1.GetOptions{}); err == nil && l.Spec.LeaseTransitions != nil {
			transitions = int64(*l.Spec.LeaseTransitions)
		}
		cancel()
		body := map[string]any{"isLeader": st.leading.Load(), "holder": holder, "identity": o.identity, "lease": lease, "leaseTransitions": transitions}
		if st.leading.Load() {
			body["token"] = st.token.Load()
		}
		writeJSON(w, http.StatusOK, body)
	})
	mux.HandleFunc("GET /token", func(w http.ResponseWriter, _ *http.Request) {
		if st.leading.Load() {
			writeJSON(w, http.StatusOK, map[string]any{"token": st.token.Load(), "lease": lease})
			return
		}
		holder := ""
		if le := st.elector(); le != nil {
			holder = le.GetLeader()
		}
		writeJSON(w, http.StatusConflict, map[string]any{"error": "not the leader", "holder": holder})
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	logger.Printf("starting lease=%s leaseDuration=%v renewDeadline=%v retryPeriod=%v", lease, o.leaseDuration, o.renewDeadline, o.retryPeriod)
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   o.leaseDuration,
			RenewDeadline:   o.renewDeadline,
			RetryPeriod:     o.retryPeriod,
			ReleaseOnCancel: o.releaseOnCancel,
			Name:            lease,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					st.mu.Lock()
					round := st.round
					st.mu.Unlock()
					var tok int64
					gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
					if l, err := client.CoordinationV1().Leases(o.namespace).Get(gctx, o.leaseName, metav1.GetOptions{}); err == nil && l.Spec.LeaseTransitions != nil {
						tok = int64(*l.Spec.LeaseTransitions)
					}
					cancel()
					// A well-behaved client-go user stops leading as soon as
					// ctx ends (lost renew, or SIGTERM before the release).
					st.mu.Lock()
					if ctx.Err() == nil && round == st.round {
						st.token.Store(tok)
						st.leading.Store(true)
						logger.Printf("started leading token=%d", tok)
					}
					st.mu.Unlock()
					<-ctx.Done()
					st.mu.Lock()
					if round == st.round {
						st.leading.Store(false)
					}
					st.mu.Unlock()
				},
				OnStoppedLeading: func() {
					st.leading.Store(false)
					logger.Printf("stopped leading")
				},
				OnNewLeader: func(id string) { logger.Printf("leader is %q", id) },
			},
		})
		if err != nil {
			return fmt.Errorf("leader elector: %w", err)
		}
		st.mu.Lock()
		st.le = le
		st.round++
		st.mu.Unlock()
		le.Run(ctx)
		st.leading.Store(false)
	}
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	logger.Printf("stopped")
	return nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
