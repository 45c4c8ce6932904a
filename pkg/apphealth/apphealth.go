// Package apphealth probes the app next to the sidecar the way the kubelet's
// HTTP probe does: GET a loopback URL every period with a timeout; a 2xx or
// 3xx answer is a success, anything else (another status, a refused
// connection, no answer or a body that does not arrive within the timeout)
// a failure. FailureThreshold
// consecutive failures make the app unhealthy, SuccessThreshold consecutive
// successes healthy. It starts unknown (never healthy): Healthy is false
// until the first SuccessThreshold successes.
//
// On every change between healthy and unhealthy the Prober calls OnChange
// (the sidecar takes itself out of the election, or puts itself back). If
// OnChange fails, it is called again, with the same arguments, after the
// next probe, until it succeeds or the state changes again.
//
// The algorithm (Step) is apart from the timing (Run), and both run on an
// injectable clock, so tests drive it one probe at a time.
package apphealth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/elector-sidecar/elector-sidecar/pkg/version"
)

// Defaults, as the sidecar's flags have them.
const (
	DefaultPeriod           = 2 * time.Second
	DefaultTimeout          = time.Second
	DefaultFailureThreshold = 3
	DefaultSuccessThreshold = 1
)

// maxBody is how much of an answer is read (the kubelet reads 10 KiB).
const maxBody = 10 << 10

// State is the app's health as the prober judges it.
type State int

const (
	// Unknown: not yet SuccessThreshold successes nor FailureThreshold
	// failures since start.
	Unknown State = iota
	Healthy
	Unhealthy
)

func (s State) String() string {
	switch s {
	case Healthy:
		return "healthy"
	case Unhealthy:
		return "unhealthy"
	default:
		return "unknown"
	}
}

// Config is one prober's settings and dependencies.
type Config struct {
	// URL is GET every Period; the sidecar allows only loopback URLs.
	URL string
	// Period between the starts of two probes; Timeout bounds each (< Period).
	Period  time.Duration
	Timeout time.Duration
	// FailureThreshold and SuccessThreshold are the consecutive results that
	// make the app unhealthy and healthy (both >= 1).
	FailureThreshold int
	SuccessThreshold int

	// OnChange is called on each change between healthy and unhealthy
	// (never for unknown), with "app healthy" or "app unhealthy: <last
	// error>" as the reason. A non-nil error makes the prober call it again
	// after the next probe. It runs in the prober's goroutine: it delays the
	// next probe while it runs.
	OnChange func(ctx context.Context, healthy bool, reason string) error

	// Clock; nil means the real one. Timeouts run on it too.
	Clock clock.WithTickerAndDelayedExecution
	// Client; nil means one without keep-alives, proxies or redirects (as
	// the kubelet's probes).
	Client *http.Client
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Registerer receives elector_app_healthy and
	// elector_app_health_probe_failures_total; nil registers none.
	Registerer prometheus.Registerer
}

// Validate returns the first problem with the settings.
func (c *Config) Validate() error {
	switch {
	case c.URL == "":
		return errors.New("apphealth: URL must be set")
	case c.Period <= 0:
		return fmt.Errorf("apphealth: period %v must be positive", c.Period)
	case c.Timeout <= 0 || c.Timeout >= c.Period:
		return fmt.Errorf("apphealth: timeout %v must be positive and less than period %v", c.Timeout, c.Period)
	case c.FailureThreshold < 1:
		return fmt.Errorf("apphealth: failure threshold %d must be at least 1", c.FailureThreshold)
	case c.SuccessThreshold < 1:
		return fmt.Errorf("apphealth: success threshold %d must be at least 1", c.SuccessThreshold)
	}
	return nil
}

// Prober probes one URL. Create it with New; run it with Run, or step it
// with Step (tests). Healthy is safe for concurrent use.
type Prober struct {
	cfg    Config
	clock  clock.WithTickerAndDelayedExecution
	client *http.Client
	log    *slog.Logger

	healthyGauge prometheus.Gauge
	failures     prometheus.Counter

	// Owned by the goroutine that calls Step.
	state            State
	successes, fails int
	lastErr          error
	pending          bool // OnChange for state not delivered yet
	pendingOK        bool
	pendingReason    string
	healthy          atomic.Bool
}

// New validates cfg and registers the metrics.
func New(cfg Config) (*Prober, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Prober{
		cfg:    cfg,
		clock:  cfg.Clock,
		client: cfg.Client,
		log:    cfg.Logger,
		healthyGauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "elector_app_healthy",
			Help: "1 while the app's health probe (--app-health-url) passes, 0 while it fails or before it first passed.",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "elector_app_health_probe_failures_total",
			Help: "App health probes that failed (status other than 2xx/3xx, connection error, timeout).",
		}),
	}
	if p.clock == nil {
		p.clock = clock.RealClock{}
	}
	if p.client == nil {
		p.client = &http.Client{
			Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse // a 3xx is a success, as it is
			},
		}
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	p.log = p.log.With("appHealthURL", cfg.URL)
	if reg := cfg.Registerer; reg != nil {
		for _, c := range []prometheus.Collector{p.healthyGauge, p.failures} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("registering app health metrics: %w", err)
			}
		}
	}
	return p, nil
}

// Healthy reports whether the app is healthy now (false while unknown).
func (p *Prober) Healthy() bool {
	return p.healthy.Load()
}

// State returns the current state. Only for the goroutine that steps.
func (p *Prober) State() State { return p.state }

// Run probes at once and then every Period until ctx ends; it returns when
// the probe in flight (and OnChange) has returned.
func (p *Prober) Run(ctx context.Context) {
	t := p.clock.NewTicker(p.cfg.Period)
	defer t.Stop()
	for {
		_ = p.Step(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// Step runs one probe, updates the state and calls OnChange if the state
// changed or an earlier call failed. It returns the probe's error.
func (p *Prober) Step(ctx context.Context) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	err := p.probe(ctx)
	if ctx.Err() != nil {
		// Stopping: a probe cut short says nothing about the app.
		return err
	}
	prev := p.state
	if err == nil {
		p.fails = 0
		p.successes++
		if p.state != Healthy && p.successes >= p.cfg.SuccessThreshold {
			p.state = Healthy
		}
	} else {
		p.failures.Inc()
		p.lastErr = err
		p.successes = 0
		p.fails++
		if p.state != Unhealthy && p.fails >= p.cfg.FailureThreshold {
			p.state = Unhealthy
		}
		p.log.Debug("app health probe failed", "err", err, "consecutiveFailures", p.fails)
	}
	if p.state != prev {
		p.transition(prev)
	}
	if p.pending && p.cfg.OnChange != nil {
		if cerr := p.cfg.OnChange(ctx, p.pendingOK, p.pendingReason); cerr != nil {
			p.log.Warn("acting on app health failed; trying again after the next probe", "healthy", p.pendingOK, "err", cerr)
		} else {
			p.pending = false
		}
	}
	return err
}

func (p *Prober) transition(prev State) {
	ok := p.state == Healthy
	p.healthy.Store(ok)
	if ok {
		p.healthyGauge.Set(1)
		p.log.Info("app healthy", "was", prev.String(), "consecutiveSuccesses", p.successes)
		p.pendingReason = "app healthy"
	} else {
		p.healthyGauge.Set(0)
		p.log.Warn("app unhealthy", "was", prev.String(), "consecutiveFailures", p.fails, "err", p.lastErr)
		p.pendingReason = "app unhealthy: " + p.lastErr.Error()
	}
	p.pending, p.pendingOK = true, ok
}

// probe GETs the URL once, bounded by Timeout on the prober's clock.
func (p *Prober) probe(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	errTimeout := fmt.Errorf("no answer within %v", p.cfg.Timeout)
	timer := p.clock.AfterFunc(p.cfg.Timeout, func() { cancel(errTimeout) })
	defer timer.Stop()

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.cfg.URL, nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "elector-sidecar/"+version.Version)
	req.Header.Set("Accept", "*/*")
	resp, err := p.client.Do(req)
	if err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, errTimeout) {
			return fmt.Errorf("GET %s: %w", p.cfg.URL, errTimeout)
		}
		return err
	}
	// The status decides (as for the kubelet), once the body (up to maxBody)
	// has arrived: a body cut by the timeout or the connection is a failure,
	// as the kubelet's ReadAtMost error is.
	_, rerr := io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
	_ = resp.Body.Close()
	if rerr != nil {
		if cause := context.Cause(ctx); errors.Is(cause, errTimeout) {
			return fmt.Errorf("GET %s: body: %w", p.cfg.URL, errTimeout)
		}
		return fmt.Errorf("GET %s: reading the body: %w", p.cfg.URL, rerr)
	}
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("GET %s: status %d", p.cfg.URL, resp.StatusCode)
	}
	return nil
}
