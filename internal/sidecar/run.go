package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/elector-sidecar/elector-sidecar/pkg/apphealth"
	"github.com/elector-sidecar/elector-sidecar/pkg/election"
	"github.com/elector-sidecar/elector-sidecar/pkg/kubeclient"
	"github.com/elector-sidecar/elector-sidecar/pkg/leaderlabel"
	"github.com/elector-sidecar/elector-sidecar/pkg/localapi"
	"github.com/elector-sidecar/elector-sidecar/pkg/shards"
	"github.com/elector-sidecar/elector-sidecar/pkg/version"
)

// shutdownTimeout bounds the HTTP servers' graceful stop after the release.
const shutdownTimeout = 400 * time.Millisecond

// RestConfig loads the kubeconfig file, or the in-cluster config without
// one, with the client-side rate limit of --kube-api-qps and
// --kube-api-burst.
func RestConfig(kubeconfig string, qps float64, burst int) (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("loading kubernetes client config: %w", err)
	}
	cfg.UserAgent = "elector-sidecar/" + version.Version
	// Lease writes are tiny and rare; a leader must never queue behind a
	// client-side rate limiter (the defaults, 50 and 100, leave room).
	cfg.QPS, cfg.Burst = float32(qps), burst
	// Protobuf, as the kube components ask for it: every follower decodes
	// every Lease watch event, and with many candidates on one machine each
	// event wakes them all at once. Decoding a Lease (managedFields
	// included) from protobuf costs a follower about a third less CPU than
	// from JSON (docs/benchmarks.md, Scale). JSON stays acceptable for an
	// API server (or proxy) that cannot answer in protobuf.
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	// No gzip: the API server compresses a watch stream event by event
	// (a flush of its gzip writer per event, for each watcher alone) when
	// the client accepts it, and every follower then inflates every event.
	// For a Lease (a few KiB, at most) that is CPU on both sides for
	// nothing: with 100 candidates on one machine it was over a third of
	// the API server's CPU and a tenth of the followers' in a handoff, and
	// the handoff waited behind it (docs/benchmarks.md, Scale).
	cfg.DisableCompression = true
	return cfg, nil
}

// Run starts the election and the local API and blocks until ctx is done,
// then releases the Lease and stops. Listener errors are returned wrapped.
func Run(ctx context.Context, c *Config, log *slog.Logger) error {
	qps, burst := c.KubeAPIQPS, c.KubeAPIBurst
	if c.Shards > 0 {
		// A member leaving with its shards writes them all at once.
		qps, burst = max(qps, float64(c.Shards)), max(burst, 2*c.Shards)
	}
	restCfg, err := RestConfig(c.Kubeconfig, qps, burst)
	if err != nil {
		return err
	}
	// Only the Leases, Pods and Events the sidecar uses: client-go's
	// clientset would link every API group (see pkg/kubeclient).
	client, err := kubeclient.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("creating kubernetes client: %w", err)
	}
	ec := c.ElectionConfig()
	// Every elector_* metric carries lease="<namespace>/<name>" (metrics.go).
	reg, electorReg := newRegistry(ec.LeaseKey())
	ec.Client = client
	ec.Logger = log
	ec.Registerer = electorReg
	if c.AppHealthURL != "" {
		// An app that has never been healthy does not lead.
		ec.StartWithdrawn = AppNotHealthyYet
	}
	var labeler *leaderlabel.Labeler
	if c.LeaderLabel != "" {
		// The holder identity is the pod name; the pod is in the Lease's namespace.
		labeler, err = leaderlabel.New(leaderlabel.Config{Client: client, Namespace: c.LeaseNamespace, PodName: c.Identity,
			Key: c.LeaderLabel, PodSelector: c.LeaderLabelSelector, Logger: log, Registerer: electorReg,
			// A leader reads its pod (and lists the labelled pods) again every lease duration.
			ResyncPeriod: c.LeaseDuration})
		if err != nil {
			return err
		}
		// The label leaves this pod before the Lease is written free.
		ec.BeforeRelease = labeler.BeforeRelease
	}
	// Events on the Lease, written in the background (client-go's
	// record.EventBroadcaster would link strategic merge patch and the
	// OpenAPI models: see kubeclient.Recorder).
	recorder := kubeclient.NewRecorder(client.Events(c.LeaseNamespace), corev1.EventSource{Component: "elector-sidecar", Host: c.Identity}, log, nil)
	defer recorder.Shutdown()
	ec.Recorder = recorder
	var (
		el   *election.Elector
		set  *shards.Set
		cand candidate
		run  func(context.Context) error
	)
	if c.Shards > 0 {
		if set, err = shards.New(shards.Config{Config: ec, Shards: c.Shards}); err != nil {
			return err
		}
		el, cand, run = set.Session(), set, set.Run
	} else {
		if el, err = election.New(ec); err != nil {
			return err
		}
		cand, run = el, el.Run
	}
	prober, err := c.newProber(cand, electorReg, log)
	if err != nil {
		return err
	}
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})

	// Bind before campaigning: a port clash is a startup failure, not a
	// leader that nobody can ask.
	var apiOpts []localapi.Option
	if prober != nil {
		apiOpts = append(apiOpts, localapi.WithAppHealth(prober.Healthy))
	}
	if set != nil {
		apiOpts = append(apiOpts, localapi.WithShards(set))
	}
	api := localapi.NewHandler(el, metrics, apiOpts...)
	servers := []*localapi.Server{localapi.NewServer(c.HTTPAddress, api)}
	if addr := c.DiagnosticsAddress(); addr != "" {
		// --http-endpoint: /healthz, /readyz and /metrics only, for probes and scrapers on the pod IP.
		servers = append(servers, localapi.NewServer(addr, api.Diagnostics()))
	}
	listeners := make([]net.Listener, 0, len(servers))
	for _, s := range servers {
		ln, err := net.Listen("tcp", s.Addr)
		if err != nil {
			for _, l := range listeners {
				_ = l.Close()
			}
			return fmt.Errorf("listening on %s: %w", s.Addr, err)
		}
		// A cap on connections (slow-client defence; see localapi).
		listeners = append(listeners, localapi.LimitListener(ln, localapi.DefaultMaxConnections))
	}

	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Serve(listeners[i]); err != nil && !errors.Is(err, http.ErrServerClosed) {
				cancel(fmt.Errorf("serving %s: %w", s.Addr, err))
			}
		}()
	}
	warnIfExposed(log, c.HTTPAddress)
	for _, d := range c.Deprecations() {
		log.Warn(d)
	}
	log.Info("starting", "version", version.Version, "lease", ec.LeaseKey(), "identity", c.Identity,
		"httpAddress", listeners[0].Addr().String(), "leaseDuration", c.LeaseDuration,
		"renewDeadline", c.RenewDeadline, "retryPeriod", c.RetryPeriod, "appHealthURL", c.AppHealthURL, "leaderLabel", c.LeaderLabel)

	// The prober runs beside the election and stops with it.
	probeCtx, stopProbe := context.WithCancel(runCtx)
	defer stopProbe()
	if prober != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prober.Run(probeCtx)
		}()
	}

	// The leader label follows the election in its own goroutine (the
	// election never waits for it) and stops after the election's release.
	labelCtx, stopLabels := context.WithCancel(context.WithoutCancel(runCtx))
	defer stopLabels()
	if labeler != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			labeler.Run(labelCtx, el)
		}()
	}

	// The elector releases the Lease when runCtx ends, before Run returns;
	// the servers keep answering (with no token) until then.
	runErr := run(runCtx)
	stopProbe()
	stopLabels()
	sctx, scancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer scancel()
	for _, s := range servers {
		_ = s.Shutdown(sctx)
	}
	wg.Wait()
	if runErr != nil {
		return runErr
	}
	if cause := context.Cause(runCtx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	log.Info("stopped")
	return nil
}

// candidate is the election or the shard set, as app health moves it.
type candidate interface {
	SetCandidate(ctx context.Context, ok bool, reason string) error
}

// AppNotHealthyYet is why a sidecar with --app-health-url starts out of the
// election: its app has not passed --app-health-success-threshold probes yet.
const AppNotHealthyYet = "app not healthy yet"

// newProber returns the app health prober of --app-health-url (nil when it
// is off). Each change of the app's health takes this pod out of the
// election or puts it back; a call that fails (the loop not running yet, or
// busy past the renew deadline) is made again after the next probe.
func (c *Config) newProber(el candidate, reg prometheus.Registerer, log *slog.Logger) (*apphealth.Prober, error) {
	if c.AppHealthURL == "" {
		return nil, nil
	}
	return apphealth.New(apphealth.Config{
		URL:              c.AppHealthURL,
		Period:           c.AppHealthPeriod,
		Timeout:          c.AppHealthTimeout,
		FailureThreshold: c.AppHealthFailureThreshold,
		SuccessThreshold: c.AppHealthSuccessThreshold,
		Logger:           log,
		Registerer:       reg,
		OnChange: func(ctx context.Context, healthy bool, reason string) error {
			ctx, cancel := context.WithTimeout(ctx, c.RenewDeadline)
			defer cancel()
			return el.SetCandidate(ctx, healthy, reason)
		},
	})
}

// warnIfExposed logs a warning when the local API listens beyond loopback
// (--http-address on a pod IP, 0.0.0.0 or all interfaces): it has no
// authentication, so whoever reaches it can read the token and release the
// Lease.
func warnIfExposed(log *slog.Logger, httpAddress string) {
	host, _, err := net.SplitHostPort(httpAddress)
	if err != nil {
		return // Validate refused it
	}
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		return
	}
	log.Warn("the local API listens beyond loopback: anyone who can reach it can read the fencing token (GET /token) "+
		"and release the Lease (POST /release); keep --http-address on 127.0.0.1 unless a network policy guards it",
		"httpAddress", httpAddress)
}
