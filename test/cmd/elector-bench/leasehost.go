package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/elector-sidecar/elector-sidecar/internal/sidecar"
	"github.com/elector-sidecar/elector-sidecar/pkg/election"
	"github.com/elector-sidecar/elector-sidecar/pkg/kubeclient"
)

// `elector-bench lease-host` is the leases section's stand-in for many
// candidate pods: one process that runs --leases x --candidates candidates,
// each on Lease lease-NNNN of its group, all of one kind:
//
//   - elector-sidecar: a pkg/election Elector per candidate, built as
//     internal/sidecar.Run builds it (sidecar.RestConfig with the sidecar's
//     default client-side rate limit, pkg/kubeclient, the election's config
//     from the sidecar's flags: default timings, the direct handoff,
//     --expected-candidates, --shutdown-handoff=immediate as the other
//     sections run the sidecar), but without the local API, metrics
//     registry and Event recorder;
//   - client-go: a leaderelection.LeaderElector on a LeaseLock per
//     candidate, as test/cmd/clientgo-candidate builds it
//     (ReleaseOnCancel, client timeout renewDeadline/2, client-go's default
//     client-side rate limit).
//
// Every candidate has its own rest.Config and its own HTTP transport (a
// custom Dial keeps client-go from sharing one cached transport), so each
// holds its own TCP+TLS connection to the apiserver, as a pod does. What
// differs from real pods: they share one Go runtime, scheduler and GC, and
// one network namespace (loopback); the candidates' CPU and memory are
// reported for the host process as a whole.
//
// Control (HTTP on --control-addr):
//
//	GET  /status                -> {"candidates":N,"started":bool}
//	POST /stop?lease=L&id=ID    stops candidate ID of Lease L (its Run context is
//	                            cancelled: both kinds release the Lease as on
//	                            SIGTERM); 202 at once, 404 if unknown
//	POST /add?lease=L           starts a new candidate (fresh identity) on Lease L
//
// SIGTERM stops every candidate (each leader releases) and exits 0.

type hostOptions struct {
	kind        string
	kubeconfig  string
	namespace   string
	leases      int
	candidates  int
	controlAddr string
	startRate   float64
}

type hostCandidate struct {
	id     string
	cancel context.CancelFunc
	done   chan struct{}
}

type leaseHost struct {
	o    hostOptions
	ctx  context.Context
	log  *slog.Logger
	quit sync.WaitGroup

	mu      sync.Mutex
	groups  map[string][]*hostCandidate
	seq     int
	started bool
}

func leaseName(i int) string { return fmt.Sprintf("lease-%04d", i) }

func runLeaseHost(args []string) error {
	o := hostOptions{}
	fs := flag.NewFlagSet("lease-host", flag.ContinueOnError)
	fs.StringVar(&o.kind, "kind", "", "elector-sidecar or clientgo-candidate")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file")
	fs.StringVar(&o.namespace, "namespace", "", "namespace of the Leases")
	fs.IntVar(&o.leases, "leases", 1000, "Leases (candidate groups)")
	fs.IntVar(&o.candidates, "candidates", 3, "candidates per Lease")
	fs.StringVar(&o.controlAddr, "control-addr", "127.0.0.1:0", "control API address")
	fs.Float64Var(&o.startRate, "start-rate", 200, "candidates started per second")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.kind != string(sc) && o.kind != string(cg) {
		return fmt.Errorf("--kind must be %s or %s", sc, cg)
	}
	if o.kubeconfig == "" || o.namespace == "" || o.leases < 1 || o.candidates < 1 || o.startRate <= 0 {
		return errors.New("--kubeconfig and --namespace are required; --leases, --candidates and --start-rate must be positive")
	}
	// client-go's leaderelection logs every attempt through klog.
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	h := &leaseHost{o: o, ctx: ctx, groups: map[string][]*hostCandidate{},
		log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	ln, err := net.Listen("tcp", o.controlAddr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h.mux(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	fmt.Fprintf(os.Stderr, "lease-host: %s, %d Leases x %d candidates, control %s\n", o.kind, o.leases, o.candidates, ln.Addr())

	// Start the candidates at startRate, round-robin over the groups, so
	// every Lease gets its first candidate early.
	interval := time.Duration(float64(time.Second) / o.startRate)
	next := time.Now()
start:
	for c := 0; c < o.candidates; c++ {
		for i := 0; i < o.leases; i++ {
			if err := h.startOne(leaseName(i)); err != nil {
				fmt.Fprintln(os.Stderr, "lease-host:", err)
				break start
			}
			next = next.Add(interval)
			select {
			case <-ctx.Done():
				break start
			case <-time.After(time.Until(next)):
			}
		}
	}
	h.mu.Lock()
	h.started = true
	h.mu.Unlock()
	<-ctx.Done()
	h.quit.Wait() // every candidate has released and returned
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	return nil
}

func (h *leaseHost) mux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		h.mu.Lock()
		n := 0
		for _, g := range h.groups {
			n += len(g)
		}
		body := map[string]any{"candidates": n, "started": h.started}
		h.mu.Unlock()
		writeJSONBody(w, http.StatusOK, body)
	})
	mux.HandleFunc("POST /stop", func(w http.ResponseWriter, r *http.Request) {
		lease, id := r.URL.Query().Get("lease"), r.URL.Query().Get("id")
		h.mu.Lock()
		var c *hostCandidate
		g := h.groups[lease]
		for i, m := range g {
			if m.id == id {
				c = m
				h.groups[lease] = append(g[:i:i], g[i+1:]...)
				break
			}
		}
		h.mu.Unlock()
		if c == nil {
			writeJSONBody(w, http.StatusNotFound, map[string]any{"error": "no candidate " + id + " on " + lease})
			return
		}
		c.cancel()
		writeJSONBody(w, http.StatusAccepted, map[string]any{"stopping": id})
	})
	mux.HandleFunc("POST /add", func(w http.ResponseWriter, r *http.Request) {
		lease := r.URL.Query().Get("lease")
		if lease == "" {
			writeJSONBody(w, http.StatusBadRequest, map[string]any{"error": "query parameter lease is required"})
			return
		}
		if err := h.startOne(lease); err != nil {
			writeJSONBody(w, http.StatusInternalServerError, map[string]any{"error": err.Error()})
			return
		}
		writeJSONBody(w, http.StatusOK, map[string]any{"added": lease})
	})
	return mux
}

func writeJSONBody(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// restConfig is a candidate's own client config: the sidecar's, with a
// Dial of its own so client-go builds a new transport (one connection per
// candidate, as in a pod) instead of sharing its cached one.
func (h *leaseHost) restConfig() (*rest.Config, error) {
	cfg, err := sidecar.RestConfig(h.o.kubeconfig, sidecar.DefaultKubeAPIQPS, sidecar.DefaultKubeAPIBurst)
	if err != nil {
		return nil, err
	}
	if h.o.kind == string(cg) {
		// clientgo-candidate: client-go's default rate limit and its timeout.
		cfg.QPS, cfg.Burst = 0, 0
		cfg.UserAgent = ""
		cfg.Timeout = max(time.Second, election.DefaultRenewDeadline/2)
	}
	cfg.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return cfg, nil
}

func (h *leaseHost) startOne(lease string) error {
	if h.ctx.Err() != nil {
		return nil
	}
	h.mu.Lock()
	h.seq++
	id := fmt.Sprintf("%s-c%d", lease, h.seq)
	h.mu.Unlock()
	cfg, err := h.restConfig()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(h.ctx)
	c := &hostCandidate{id: id, cancel: cancel, done: make(chan struct{})}
	var runFn func()
	if h.o.kind == string(sc) {
		client, err := kubeclient.NewForConfig(cfg)
		if err != nil {
			cancel()
			return err
		}
		// The election's config as the sidecar builds it from its flags:
		// the defaults, --expected-candidates as the chart passes its replica
		// count, and --shutdown-handoff=immediate as the other sections run
		// the sidecar (a native sidecar: the app has exited first).
		sc, err := sidecar.Parse([]string{"--lease-name=" + lease, "--lease-namespace=" + h.o.namespace, "--identity=" + id,
			fmt.Sprintf("--expected-candidates=%d", h.o.candidates), "--shutdown-handoff=immediate"}, sidecar.Env{
			Getenv:   func(string) string { return "" },
			ReadFile: func(string) ([]byte, error) { return nil, os.ErrNotExist },
			Hostname: os.Hostname,
		}, io.Discard)
		if err != nil {
			cancel()
			return err
		}
		ec := sc.ElectionConfig()
		ec.Client, ec.Logger = client, h.log
		el, err := election.New(ec)
		if err != nil {
			cancel()
			return err
		}
		runFn = func() {
			if err := el.Run(ctx); err != nil {
				h.log.Warn("elector ended", "identity", id, "err", err)
			}
		}
	} else {
		client, err := coordinationv1client.NewForConfig(cfg)
		if err != nil {
			cancel()
			return err
		}
		lock := &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Name: lease, Namespace: h.o.namespace},
			Client:     client,
			LockConfig: resourcelock.ResourceLockConfig{Identity: id},
		}
		runFn = func() {
			// As clientgo-candidate: run again after a lost term, until stopped.
			for ctx.Err() == nil {
				le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
					Lock: lock, LeaseDuration: election.DefaultLeaseDuration, RenewDeadline: election.DefaultRenewDeadline,
					RetryPeriod: election.DefaultRetryPeriod, ReleaseOnCancel: true, Name: h.o.namespace + "/" + lease,
					Callbacks: leaderelection.LeaderCallbacks{
						OnStartedLeading: func(ctx context.Context) { <-ctx.Done() },
						OnStoppedLeading: func() {},
					},
				})
				if err != nil {
					h.log.Warn("leader elector", "identity", id, "err", err)
					return
				}
				le.Run(ctx)
			}
		}
	}
	h.mu.Lock()
	h.groups[lease] = append(h.groups[lease], c)
	h.mu.Unlock()
	h.quit.Add(1)
	go func() {
		defer h.quit.Done()
		defer close(c.done)
		runFn()
	}()
	return nil
}
