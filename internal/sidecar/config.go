// Package sidecar wires the elector-sidecar binary: one Config parsed from
// flags (flags.go) and ELECTOR_* environment variables (env.go), a Validate
// step (validate.go), the logger (logging.go), and Run.
package sidecar

import (
	"strings"
	"time"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
)

// Config is the whole configuration of the binary.
type Config struct {
	LeaseName       string
	LeaseNamespace  string
	Identity        string
	LeaseDuration   time.Duration
	RenewDeadline   time.Duration
	RetryPeriod     time.Duration
	ClockSkewMargin time.Duration
	HTTPAddress     string
	// HTTPEndpoint is the diagnostics listener (--http-endpoint): only
	// /healthz, /readyz and /metrics, for the kubelet's probes and
	// Prometheus on the pod IP; off while empty.
	HTTPEndpoint string
	// MetricsAddress is --metrics-address as given: the deprecated alias of
	// --http-endpoint. DiagnosticsAddress resolves the two.
	MetricsAddress string
	Kubeconfig     string
	LogFormat      string
	LogLevel       string
	ShowVersion    bool

	// App health (--app-health-*): off while AppHealthURL is empty.
	AppHealthURL              string
	AppHealthPeriod           time.Duration
	AppHealthTimeout          time.Duration
	AppHealthFailureThreshold int
	AppHealthSuccessThreshold int

	// LeaderLabel is the pod label key that marks the leader's pod
	// (--leader-label); off while empty.
	LeaderLabel string
	// LeaderLabelSelector is --leader-label-selector: a label selector of
	// this election's pods; a new leader removes the label only from those
	// ("": every pod of the namespace).
	LeaderLabelSelector string

	// LeaseLabels is --lease-labels as given: key=value pairs separated by
	// commas ("" for none); ElectionConfig parses it.
	LeaseLabels string

	// ExpectedCandidates is --expected-candidates: how many candidates
	// usually run for the Lease (0: unknown).
	ExpectedCandidates int

	// ShutdownHandoff is --shutdown-handoff: after-validity or immediate
	// (election.Config.ShutdownHandoff).
	ShutdownHandoff string
	// DirectHandoff is --direct-handoff (election.Config.DirectHandoff).
	DirectHandoff bool
	// Shards is --shards: 0 runs the one-Lease election; N > 0 makes this
	// pod a member of the shard set LeaseName with N shards (pkg/shards).
	Shards int

	// KubeAPIQPS and KubeAPIBurst are the client-side rate limit on API
	// server requests (--kube-api-qps, --kube-api-burst).
	KubeAPIQPS   float64
	KubeAPIBurst int
}

// UsageError is a bad flag or value: the binary exits 2 with its message.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return lineBreaks.Replace(e.Err.Error()) }

// lineBreaks escapes the line breaks that an argument can carry into an
// error (the flag package quotes values, not the names of unknown flags nor
// bad syntax), so that a UsageError is always one line.
var lineBreaks = strings.NewReplacer("\n", `\n`, "\r", `\r`, "\v", `\v`, "\f", `\f`,
	"\u0085", `\u0085`, "\u2028", `\u2028`, "\u2029", `\u2029`)

func (e *UsageError) Unwrap() error { return e.Err }

// DiagnosticsAddress is the address of the diagnostics listener:
// --http-endpoint, else its deprecated alias --metrics-address; "" for none.
func (c *Config) DiagnosticsAddress() string {
	if c.HTTPEndpoint != "" {
		return c.HTTPEndpoint
	}
	return c.MetricsAddress
}

// Deprecations returns a warning for every deprecated flag (or variable)
// the configuration uses; Run logs them.
func (c *Config) Deprecations() []string {
	var out []string
	if c.MetricsAddress != "" {
		out = append(out, "--metrics-address (ELECTOR_METRICS_ADDRESS) is deprecated: use --http-endpoint (ELECTOR_HTTP_ENDPOINT), "+
			"which serves /healthz and /readyz for httpGet probes besides /metrics")
	}
	return out
}

// ElectionConfig maps the binary's config onto the election's (no client).
// A --lease-labels that does not parse (Validate reports it) sets none.
func (c *Config) ElectionConfig() election.Config {
	labels, _ := parseLabels(c.LeaseLabels)
	return election.Config{
		Namespace:          c.LeaseNamespace,
		Name:               c.LeaseName,
		Identity:           c.Identity,
		LeaseDuration:      c.LeaseDuration,
		RenewDeadline:      c.RenewDeadline,
		RetryPeriod:        c.RetryPeriod,
		ClockSkewMargin:    c.ClockSkewMargin,
		LeaseLabels:        labels,
		ExpectedCandidates: c.ExpectedCandidates,
		ShutdownHandoff:    election.Handoff(c.ShutdownHandoff),
		DirectHandoff:      c.DirectHandoff,
	}
}

// The client-side rate limit defaults: Lease writes are tiny and rare, and
// a leader must never queue behind the limiter.
const (
	DefaultKubeAPIQPS   = 50
	DefaultKubeAPIBurst = 100
)
