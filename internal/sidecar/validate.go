package sidecar

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/elector-sidecar/elector-sidecar/pkg/leaderlabel"
	"github.com/elector-sidecar/elector-sidecar/pkg/shards"
)

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
	if _, err := labels.Parse(c.LeaderLabelSelector); err != nil {
		return fmt.Errorf("--leader-label-selector %q: not a label selector: %v", c.LeaderLabelSelector, err)
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
	if err := c.validateShards(); err != nil {
		return err
	}
	ec := c.ElectionConfig()
	ec.Client = nil
	if errs := ec.Validate(); len(errs) > 0 {
		return flagError(errs[0])
	}
	return nil
}

// validateShards checks --shards and what a shard set cannot combine with.
func (c *Config) validateShards() error {
	switch {
	case c.Shards < 0 || c.Shards > shards.MaxShards:
		return fmt.Errorf("--shards %d: must be between 0 (one Lease) and %d", c.Shards, shards.MaxShards)
	case c.Shards == 0:
		return nil
	case c.LeaderLabel != "":
		return errors.New("--leader-label: not supported with --shards (every pod of a shard set works; there is no one leader to label)")
	}
	sc := shards.Config{Config: c.ElectionConfig(), Shards: c.Shards}
	for _, fe := range sc.Validate() {
		if fe.Field == "shards" || fe.Field == "leaseName" {
			return fmt.Errorf("--lease-name %q with --shards %d: %s", c.LeaseName, c.Shards, fe.Detail)
		}
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
