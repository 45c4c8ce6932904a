// Package sidecar wires the elector-sidecar binary: one Config parsed from
// flags and ELECTOR_* environment variables, a Validate step, and Run.
package sidecar

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/elector-sidecar/elector-sidecar/pkg/apphealth"
	"github.com/elector-sidecar/elector-sidecar/pkg/election"
	"github.com/elector-sidecar/elector-sidecar/pkg/leaderlabel"
)

// ServiceAccountNamespaceFile is where a pod finds its namespace.
const ServiceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

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

	// LeaseLabels is --lease-labels as given: key=value pairs separated by
	// commas ("" for none); ElectionConfig parses it.
	LeaseLabels string

	// ExpectedCandidates is --expected-candidates: how many candidates
	// usually run for the Lease (0: unknown).
	ExpectedCandidates int

	// ShutdownHandoff is --shutdown-handoff: after-validity or immediate
	// (election.Config.ShutdownHandoff).
	ShutdownHandoff string

	// KubeAPIQPS and KubeAPIBurst are the client-side rate limit on API
	// server requests (--kube-api-qps, --kube-api-burst).
	KubeAPIQPS   float64
	KubeAPIBurst int
}

// Env abstracts the process environment for tests.
type Env struct {
	Getenv   func(string) string
	ReadFile func(string) ([]byte, error)
	Hostname func() (string, error)
}

// OSEnv is the real environment.
var OSEnv = Env{Getenv: os.Getenv, ReadFile: os.ReadFile, Hostname: os.Hostname}

// UsageError is a bad flag or value: the binary exits 2 with its message.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return lineBreaks.Replace(e.Err.Error()) }

// lineBreaks escapes the line breaks that an argument can carry into an
// error (the flag package quotes values, not the names of unknown flags nor
// bad syntax), so that a UsageError is always one line.
var lineBreaks = strings.NewReplacer("\n", `\n`, "\r", `\r`, "\v", `\v`, "\f", `\f`,
	"\u0085", `\u0085`, "\u2028", `\u2028`, "\u2029", `\u2029`)

func (e *UsageError) Unwrap() error { return e.Err }

// flagSpec ties a flag to its environment variable.
type flagSpec struct {
	name, env string
}

// Flags lists every flag that has an environment variable (all but
// --version), for Parse, docs and tests.
var Flags = []flagSpec{
	{"lease-name", "ELECTOR_LEASE_NAME"},
	{"lease-namespace", "ELECTOR_LEASE_NAMESPACE"},
	{"identity", "ELECTOR_IDENTITY"},
	{"lease-duration", "ELECTOR_LEASE_DURATION"},
	{"renew-deadline", "ELECTOR_RENEW_DEADLINE"},
	{"retry-period", "ELECTOR_RETRY_PERIOD"},
	{"clock-skew-margin", "ELECTOR_CLOCK_SKEW_MARGIN"},
	{"http-address", "ELECTOR_HTTP_ADDRESS"},
	{"http-endpoint", "ELECTOR_HTTP_ENDPOINT"},
	{"metrics-address", "ELECTOR_METRICS_ADDRESS"},
	{"kubeconfig", "ELECTOR_KUBECONFIG"},
	{"log-format", "ELECTOR_LOG_FORMAT"},
	{"log-level", "ELECTOR_LOG_LEVEL"},
	{"app-health-url", "ELECTOR_APP_HEALTH_URL"},
	{"app-health-period", "ELECTOR_APP_HEALTH_PERIOD"},
	{"app-health-timeout", "ELECTOR_APP_HEALTH_TIMEOUT"},
	{"app-health-failure-threshold", "ELECTOR_APP_HEALTH_FAILURE_THRESHOLD"},
	{"app-health-success-threshold", "ELECTOR_APP_HEALTH_SUCCESS_THRESHOLD"},
	{"leader-label", "ELECTOR_LEADER_LABEL"},
	{"lease-labels", "ELECTOR_LEASE_LABELS"},
	{"expected-candidates", "ELECTOR_EXPECTED_CANDIDATES"},
	{"shutdown-handoff", "ELECTOR_SHUTDOWN_HANDOFF"},
	{"kube-api-qps", "ELECTOR_KUBE_API_QPS"},
	{"kube-api-burst", "ELECTOR_KUBE_API_BURST"},
}

// newFlagSet registers every flag of the binary on c, with its default.
// Parse uses it; the README test checks the README's table against it.
func newFlagSet(c *Config) *flag.FlagSet {
	fs := flag.NewFlagSet("elector-sidecar", flag.ContinueOnError)
	// Errors are returned as one line; the usage text only for -h.
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.LeaseName, "lease-name", "", "name of the coordination.k8s.io/v1 Lease to elect on (required)")
	fs.StringVar(&c.LeaseNamespace, "lease-namespace", "", "namespace of the Lease (default: $POD_NAMESPACE, then the service account's namespace, then \"default\")")
	fs.StringVar(&c.Identity, "identity", "", "this candidate's identity, written as the Lease holder (default: $POD_NAME, then the hostname)")
	fs.DurationVar(&c.LeaseDuration, "lease-duration", election.DefaultLeaseDuration, "how long followers wait after the last observed renewal before taking over")
	fs.DurationVar(&c.RenewDeadline, "renew-deadline", election.DefaultRenewDeadline, "how long the leader retries renewing before it gives up its term")
	fs.DurationVar(&c.RetryPeriod, "retry-period", election.DefaultRetryPeriod, "renew interval of the leader and back-off after failed requests")
	fs.DurationVar(&c.ClockSkewMargin, "clock-skew-margin", election.DefaultClockSkewMargin, "the token stops this long before other candidates could take over")
	fs.StringVar(&c.HTTPAddress, "http-address", "127.0.0.1:4040", "address of the local API (/leader, /token, /release, /healthz, /readyz, /metrics)")
	fs.StringVar(&c.HTTPEndpoint, "http-endpoint", "", "optional diagnostics address that serves only /healthz, /readyz and /metrics, for httpGet probes and Prometheus on the pod IP (e.g. :9090)")
	fs.StringVar(&c.MetricsAddress, "metrics-address", "", "deprecated alias of --http-endpoint")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then in-cluster config)")
	fs.StringVar(&c.LogFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&c.AppHealthURL, "app-health-url", "", "the app's health endpoint, http://127.0.0.1:PORT/PATH (or [::1], localhost); while it fails this pod does not lead (default: off)")
	fs.DurationVar(&c.AppHealthPeriod, "app-health-period", apphealth.DefaultPeriod, "how often the app's health endpoint is probed")
	fs.DurationVar(&c.AppHealthTimeout, "app-health-timeout", apphealth.DefaultTimeout, "how long one app health probe may take; must be < --app-health-period")
	fs.IntVar(&c.AppHealthFailureThreshold, "app-health-failure-threshold", apphealth.DefaultFailureThreshold, "consecutive failed probes that make the app unhealthy (the pod steps down)")
	fs.IntVar(&c.AppHealthSuccessThreshold, "app-health-success-threshold", apphealth.DefaultSuccessThreshold, "consecutive passed probes that make the app healthy (the pod campaigns)")
	fs.StringVar(&c.LeaderLabel, "leader-label", "", "label key (e.g. "+leaderlabel.DefaultKey+") set to \"true\" on this pod (named by --identity, in the Lease namespace) while it leads, for a Service that routes to the leader (default: off)")
	fs.StringVar(&c.LeaseLabels, "lease-labels", "", "labels of the Lease, key=value pairs separated by commas (e.g. app.kubernetes.io/instance=billing): set when this sidecar creates the Lease; its next write adds any the Lease lacks, and changes or removes none (default: none)")
	fs.StringVar(&c.ShutdownHandoff, "shutdown-handoff", string(election.HandoffAfterValidity), "on SIGTERM a leader stops its token at once; after-validity: no other pod leads until every token answer already given to the app (expiresInMs) has run out, since nothing guarantees the app stopped using it; immediate: another pod may lead at once, for when the app has exited before the sidecar is stopped (a native sidecar). POST /release is always immediate")
	fs.IntVar(&c.ExpectedCandidates, "expected-candidates", 0, "how many candidates usually run for this Lease (the replica count): after a release the followers spread their writes over a window sized for at least this many (3 or fewer write at once, 100 over ~1 s); 0: unknown (the Lease learns it from its handoffs)")
	fs.Float64Var(&c.KubeAPIQPS, "kube-api-qps", DefaultKubeAPIQPS, "client-side limit on API server requests per second (sustained)")
	fs.IntVar(&c.KubeAPIBurst, "kube-api-burst", DefaultKubeAPIBurst, "client-side limit on API server requests in a burst above --kube-api-qps")
	fs.BoolVar(&c.ShowVersion, "version", false, "print the version and exit")
	return fs
}

// Parse reads flags (args without the program name) over ELECTOR_* env
// vars over defaults, fills derived defaults, and validates. Errors are
// *UsageError with one line naming the flag; flag.ErrHelp for -h.
func Parse(args []string, env Env, usage io.Writer) (*Config, error) {
	c := &Config{}
	fs := newFlagSet(c)

	// Environment first, so that flags given on the command line win.
	for _, f := range Flags {
		if v, ok := lookup(env, f.env); ok {
			// fs.Set returns the flag.Value's own error ("parse error"
			// for the standard types), without the flag's name.
			if err := fs.Set(f.name, v); err != nil {
				return nil, &UsageError{fmt.Errorf("invalid value %q for %s (--%s): %w", v, f.env, f.name, err)}
			}
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(usage)
			fmt.Fprintf(usage, "Usage: elector-sidecar [flags]\n       elector-sidecar probe [PATH]\n\nEvery flag can also be set with its ELECTOR_* environment variable (see README).\n\n")
			fs.PrintDefaults()
			return nil, err
		}
		return nil, &UsageError{err}
	}
	if fs.NArg() > 0 {
		return nil, &UsageError{fmt.Errorf("unexpected argument %q: all settings are --flags", fs.Arg(0))}
	}
	if c.ShowVersion {
		return c, nil
	}
	c.fillDefaults(env)
	if err := c.Validate(); err != nil {
		return nil, &UsageError{err}
	}
	return c, nil
}

func lookup(env Env, key string) (string, bool) {
	v := env.Getenv(key)
	return v, v != ""
}

func (c *Config) fillDefaults(env Env) {
	if c.LeaseNamespace == "" {
		c.LeaseNamespace = env.Getenv("POD_NAMESPACE")
	}
	if c.LeaseNamespace == "" && env.ReadFile != nil {
		if b, err := env.ReadFile(ServiceAccountNamespaceFile); err == nil {
			c.LeaseNamespace = strings.TrimSpace(string(b))
		}
	}
	if c.LeaseNamespace == "" {
		c.LeaseNamespace = "default"
	}
	if c.Identity == "" {
		c.Identity = env.Getenv("POD_NAME")
	}
	if c.Identity == "" && env.Hostname != nil {
		if h, err := env.Hostname(); err == nil {
			c.Identity = h
		}
	}
	if c.Kubeconfig == "" {
		c.Kubeconfig = env.Getenv("KUBECONFIG")
	}
}

// Validate returns the first problem as one line naming the flag.
func (c *Config) Validate() error {
	switch {
	case c.LeaseName == "":
		return errors.New("--lease-name is required (or ELECTOR_LEASE_NAME)")
	case c.Identity == "":
		return errors.New("--identity is empty and neither POD_NAME nor the hostname is available")
	case c.LogFormat != "text" && c.LogFormat != "json":
		return fmt.Errorf("--log-format %q: must be text or json", c.LogFormat)
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return err
	}
	if err := checkAddress("--http-address", c.HTTPAddress, false); err != nil {
		return err
	}
	if err := c.validateHTTPEndpoint(); err != nil {
		return err
	}
	if err := c.validateAppHealth(); err != nil {
		return err
	}
	if c.LeaderLabel != "" {
		if why := leaderlabel.ValidateKey(c.LeaderLabel); why != "" {
			return fmt.Errorf("--leader-label %q: not a valid label key: %s", c.LeaderLabel, why)
		}
	}
	// Keys and values are checked by the election (leaseLabels below).
	if _, err := parseLabels(c.LeaseLabels); err != nil {
		return err
	}
	switch {
	case math.IsNaN(c.KubeAPIQPS) || c.KubeAPIQPS <= 0 || c.KubeAPIQPS > math.MaxFloat32:
		return fmt.Errorf("--kube-api-qps %v: must be a positive number", c.KubeAPIQPS)
	case c.KubeAPIBurst < 1:
		return fmt.Errorf("--kube-api-burst %d: must be at least 1", c.KubeAPIBurst)
	}
	ec := c.ElectionConfig()
	ec.Client = nil
	if errs := ec.Validate(); len(errs) > 0 {
		return flagError(errs[0])
	}
	return nil
}

// electionFlags maps each field path of election.Config.Validate's errors
// to its flag (without "--"). The mapping goes by path only, never by the
// error's text; TestElectionFieldsHaveFlags fails when the election reports
// a path that is missing here.
var electionFlags = map[string]string{
	"leaseName":          "lease-name",
	"leaseNamespace":     "lease-namespace",
	"identity":           "identity",
	"leaseDuration":      "lease-duration",
	"renewDeadline":      "renew-deadline",
	"retryPeriod":        "retry-period",
	"clockSkewMargin":    "clock-skew-margin",
	"leaseLabels":        "lease-labels",
	"expectedCandidates": "expected-candidates",
	"shutdownHandoff":    "shutdown-handoff",
}

// flagError words an election field error as one line naming its flag:
// `--lease-name "Bad_Name": ...`, `--lease-duration 10s: ...`. The result
// unwraps to fe, so callers can check the field with errors.As.
func flagError(fe *field.Error) error {
	name, ok := electionFlags[fe.Field]
	if !ok {
		// Not reached while the mapping is complete (see the test);
		// still one line, naming the election's field.
		return fe
	}
	var msg string
	if fe.Type == field.ErrorTypeRequired {
		msg = fmt.Sprintf("--%s is required", name)
		if env := envOf(name); env != "" {
			msg += " (or " + env + ")"
		}
		if fe.Detail != "" {
			msg += ": " + fe.Detail
		}
	} else {
		switch v := fe.BadValue.(type) {
		case string:
			msg = fmt.Sprintf("--%s %q: %s", name, v, fe.Detail)
		case metav1.Duration:
			msg = fmt.Sprintf("--%s %v: %s", name, v.Duration, fe.Detail)
		default:
			msg = fmt.Sprintf("--%s %v: %s", name, v, fe.Detail)
		}
	}
	return &fieldFlagError{msg: msg, err: fe}
}

// fieldFlagError is an election field error worded for the command line.
type fieldFlagError struct {
	msg string
	err *field.Error
}

func (e *fieldFlagError) Error() string { return e.msg }
func (e *fieldFlagError) Unwrap() error { return e.err }

// envOf returns the environment variable of a flag, "" if it has none.
func envOf(flagName string) string {
	for _, f := range Flags {
		if f.name == flagName {
			return f.env
		}
	}
	return ""
}

func checkAddress(flagName, addr string, optional bool) error {
	if addr == "" {
		if optional {
			return nil
		}
		return fmt.Errorf("%s: must not be empty", flagName)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q: want host:port (e.g. 127.0.0.1:4040)", flagName, addr)
	}
	if host != "" && net.ParseIP(host) == nil && host != "localhost" {
		return fmt.Errorf("%s %q: host must be an IP address or localhost", flagName, addr)
	}
	if p, err := net.LookupPort("tcp", port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("%s %q: invalid port", flagName, addr)
	}
	return nil
}

// DiagnosticsAddress is the address of the diagnostics listener:
// --http-endpoint, else its deprecated alias --metrics-address; "" for none.
func (c *Config) DiagnosticsAddress() string {
	if c.HTTPEndpoint != "" {
		return c.HTTPEndpoint
	}
	return c.MetricsAddress
}

// validateHTTPEndpoint checks --http-endpoint and its deprecated alias
// --metrics-address: at most one address between them, host:port, and not
// the local API's address. Errors name the flag the address came from.
func (c *Config) validateHTTPEndpoint() error {
	if c.HTTPEndpoint != "" && c.MetricsAddress != "" && c.HTTPEndpoint != c.MetricsAddress {
		return fmt.Errorf("--http-endpoint %q and --metrics-address %q: --metrics-address is a deprecated alias of --http-endpoint; set only --http-endpoint", c.HTTPEndpoint, c.MetricsAddress)
	}
	name := "--http-endpoint"
	if c.HTTPEndpoint == "" && c.MetricsAddress != "" {
		name = "--metrics-address"
	}
	addr := c.DiagnosticsAddress()
	if err := checkAddress(name, addr, true); err != nil {
		return err
	}
	if addr != "" && addr == c.HTTPAddress {
		return fmt.Errorf("%s %q: must differ from --http-address (the diagnostics endpoint serves only /healthz, /readyz and /metrics; the local API keeps its own address)", name, addr)
	}
	return nil
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

// validateAppHealth checks the --app-health-* flags (also when the URL is
// empty: a bad value is a mistake either way).
func (c *Config) validateAppHealth() error {
	if err := checkAppHealthURL(c.AppHealthURL); err != nil {
		return err
	}
	switch {
	case c.AppHealthPeriod <= 0:
		return fmt.Errorf("--app-health-period %v: must be positive", c.AppHealthPeriod)
	case c.AppHealthTimeout <= 0:
		return fmt.Errorf("--app-health-timeout %v: must be positive", c.AppHealthTimeout)
	case c.AppHealthTimeout >= c.AppHealthPeriod:
		return fmt.Errorf("--app-health-timeout %v: must be less than --app-health-period %v", c.AppHealthTimeout, c.AppHealthPeriod)
	case c.AppHealthFailureThreshold < 1:
		return fmt.Errorf("--app-health-failure-threshold %d: must be at least 1", c.AppHealthFailureThreshold)
	case c.AppHealthSuccessThreshold < 1:
		return fmt.Errorf("--app-health-success-threshold %d: must be at least 1", c.AppHealthSuccessThreshold)
	}
	return nil
}

// checkAppHealthURL accepts "" (off) or http://HOST:PORT/PATH with a
// loopback HOST (127.0.0.1, [::1], localhost): the app in this pod, never
// another pod or service.
func checkAppHealthURL(s string) error {
	if s == "" {
		return nil
	}
	bad := func(why string) error {
		return fmt.Errorf("--app-health-url %q: %s; want http://127.0.0.1:PORT/PATH, http://[::1]:PORT/PATH or http://localhost:PORT/PATH", s, why)
	}
	u, err := url.Parse(s)
	if err != nil {
		return bad("not a URL")
	}
	switch {
	case u.Scheme != "http":
		return bad("scheme must be http")
	case u.User != nil:
		return bad("must not carry user info")
	case u.Fragment != "" || strings.Contains(s, "#"):
		return bad("must not have a fragment")
	}
	switch h := u.Hostname(); h {
	case "127.0.0.1", "::1", "localhost":
	default:
		return bad("host must be loopback (the app in this pod)")
	}
	p, err := strconv.Atoi(u.Port())
	if err != nil || p < 1 || p > 65535 {
		return bad("needs a port 1-65535")
	}
	if !strings.HasPrefix(u.Path, "/") {
		return bad("needs a path (e.g. /healthz)")
	}
	return nil
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
	}
}

// The client-side rate limit defaults: Lease writes are tiny and rare, and
// a leader must never queue behind the limiter.
const (
	DefaultKubeAPIQPS   = 50
	DefaultKubeAPIBurst = 100
)

// parseLabels parses --lease-labels: "" (none), or key=value pairs
// separated by commas, with spaces around keys and values ignored. The
// value may be empty ("key="); a key may not repeat. It checks the syntax
// only; the election validates keys and values as Kubernetes labels.
func parseLabels(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	labels := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(pair, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return nil, fmt.Errorf("--lease-labels %q: %q is not key=value; want key=value pairs separated by commas (e.g. app.kubernetes.io/instance=billing)", s, strings.TrimSpace(pair))
		}
		if _, dup := labels[k]; dup {
			return nil, fmt.Errorf("--lease-labels %q: key %q is given twice", s, k)
		}
		labels[k] = v
	}
	return labels, nil
}
