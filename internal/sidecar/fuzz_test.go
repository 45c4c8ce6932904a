package sidecar

import (
	"bytes"
	"errors"
	"flag"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"
)

// FuzzParse gives Parse any command line and ELECTOR_* environment (and any
// hostname and service account namespace), and checks that it never panics
// and either returns a configuration that is valid (checked again here,
// rule by rule, not only through Validate) or a UsageError (or
// flag.ErrHelp) of one line.
//
// args and env are lists separated by NUL, which neither an argument nor an
// environment variable can contain; env's entries are KEY=VALUE.
func FuzzParse(f *testing.F) {
	for _, s := range [][4]string{
		{"--lease-name=l", "", "h", ""},
		{"--lease-name=billing\x00--lease-namespace=team\x00--identity=pod-0", "", "", ""},
		{"", "ELECTOR_LEASE_NAME=l\x00ELECTOR_LEASE_DURATION=3s\x00ELECTOR_RENEW_DEADLINE=2s\x00ELECTOR_RETRY_PERIOD=500ms\x00ELECTOR_CLOCK_SKEW_MARGIN=100ms", "h", "ns"},
		{"--lease-name=l\x00--http-address=0.0.0.0:4040\x00--metrics-address=:9090", "", "h", ""},
		{"--lease-name=l\x00--http-endpoint=:9090", "ELECTOR_METRICS_ADDRESS=:9091", "h", ""},
		{"--lease-name=l\x00--http-endpoint=127.0.0.1:4040", "", "h", ""},
		{"--lease-name=l\x00--http-address=[::1]:4040", "POD_NAME=p\x00POD_NAMESPACE=n", "", ""},
		{"--lease-name=l\x00--app-health-url=http://localhost:8080/healthz\x00--app-health-timeout=500ms", "", "h", ""},
		{"--lease-name=l\x00--leader-label=example.com/leader", "", "h", ""},
		{"--lease-name=l\x00--lease-duration=10s", "", "h", ""},
		{"--lease-name=l\x00--retry-period=9s", "", "h", ""},
		{"--lease-name=l\x00--clock-skew-margin=-1s", "", "h", ""},
		{"--lease-name=Bad_Name", "", "h", ""},
		{"--leese-name=l", "", "h", ""},
		{"--lease-name=l\x00extra", "", "h", ""},
		{"-h", "", "", ""},
		{"--version", "", "", ""},
		{"--version=maybe", "", "", ""},
		{"--lease-name", "", "h", ""},
		{"--lease-name=l\x00--", "", "h", ""},
		{"", "ELECTOR_RETRY_PERIOD=x\ny", "h", ""},
		{"--lease-name=l\x00--log-level=LOUD\n", "", "h", ""},
		{"--lease-name=l\x00--http-address=localhost:http", "", "h", ""},
		{"--lease-name=l\x00--app-health-url=http://[::1]:1/%zz", "", "h", ""},
		{"--lease-name=l", "", " ", ""},
		{"--lease-name=l", "", "h", "Bad Namespace\n"},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, args, env, hostname, saNamespace string) {
		var argv []string
		if args != "" {
			argv = strings.Split(args, "\x00")
		}
		vars := map[string]string{}
		for _, kv := range strings.Split(env, "\x00") {
			if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
				vars[k] = v
			}
		}
		var usage bytes.Buffer
		c, err := Parse(argv, testEnv(vars, saNamespace, hostname), &usage)
		if err != nil {
			if c != nil {
				t.Fatalf("Parse returned both a config and %v", err)
			}
			var ue *UsageError
			if !errors.Is(err, flag.ErrHelp) && !errors.As(err, &ue) {
				t.Fatalf("error %T (%v), want a *UsageError or flag.ErrHelp", err, err)
			}
			msg := err.Error()
			if msg == "" || strings.ContainsAny(msg, "\n\r\v\f\u0085\u2028\u2029") {
				t.Fatalf("error is not one line: %q", msg)
			}
			return
		}
		if c == nil {
			t.Fatal("no config and no error")
		}
		if c.ShowVersion {
			return
		}
		checkValid(t, c)
	})
}

// checkValid fails t unless c keeps every rule Validate promises.
func checkValid(t *testing.T, c *Config) {
	t.Helper()
	if err := c.Validate(); err != nil {
		t.Fatalf("Parse returned a config that does not validate: %v", err)
	}
	if c.LeaseName == "" || c.LeaseNamespace == "" || strings.TrimSpace(c.Identity) == "" {
		t.Fatalf("lease %q/%q identity %q", c.LeaseNamespace, c.LeaseName, c.Identity)
	}
	if !(0 < c.RetryPeriod && c.RetryPeriod < c.RenewDeadline && c.RenewDeadline < c.LeaseDuration) || c.LeaseDuration < time.Second {
		t.Fatalf("timings out of order: retry %v, renew deadline %v, lease %v", c.RetryPeriod, c.RenewDeadline, c.LeaseDuration)
	}
	if c.ClockSkewMargin < 0 || c.ClockSkewMargin >= c.LeaseDuration-c.RetryPeriod {
		t.Fatalf("clock skew margin %v with lease %v and retry %v", c.ClockSkewMargin, c.LeaseDuration, c.RetryPeriod)
	}
	diag := c.DiagnosticsAddress()
	for _, a := range []string{c.HTTPAddress, diag} {
		if a == "" && a == diag {
			continue
		}
		host, _, err := net.SplitHostPort(a)
		if err != nil || (host != "" && host != "localhost" && net.ParseIP(host) == nil) {
			t.Fatalf("address %q is not host:port with an IP or localhost", a)
		}
	}
	if diag == c.HTTPAddress {
		t.Fatalf("diagnostics endpoint and local API on one address %q", c.HTTPAddress)
	}
	if c.HTTPEndpoint != "" && c.MetricsAddress != "" && c.HTTPEndpoint != c.MetricsAddress {
		t.Fatalf("--http-endpoint %q and its alias --metrics-address %q differ", c.HTTPEndpoint, c.MetricsAddress)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		t.Fatalf("log format %q", c.LogFormat)
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		t.Fatal(err)
	}
	if !(0 < c.AppHealthTimeout && c.AppHealthTimeout < c.AppHealthPeriod) || c.AppHealthFailureThreshold < 1 || c.AppHealthSuccessThreshold < 1 {
		t.Fatalf("app health timeout %v period %v thresholds %d/%d", c.AppHealthTimeout, c.AppHealthPeriod, c.AppHealthFailureThreshold, c.AppHealthSuccessThreshold)
	}
	if c.AppHealthURL != "" {
		u, err := url.Parse(c.AppHealthURL)
		if err != nil || u.Scheme != "http" {
			t.Fatalf("app health URL %q", c.AppHealthURL)
		}
		if h := u.Hostname(); h != "127.0.0.1" && h != "::1" && h != "localhost" {
			t.Fatalf("app health URL %q is not loopback", c.AppHealthURL)
		}
	}
}

// Found by FuzzParse: the flag package prints the name of an unknown flag
// and a bad argument verbatim, line breaks included.
func TestUsageErrorsAreOneLineWhateverTheArguments(t *testing.T) {
	for _, tt := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{args: []string{"-\n"}, want: `unknown flag -\n: `},
		{args: []string{"--lease-name=l", "--a\r\nb=1"}, want: `unknown flag --a\r\nb: `},
		{args: []string{"---x\u2028y"}, want: `bad flag syntax ---x\u2028y: `},
		{args: []string{"--lease-name=l", "extra\nline"}, want: `unexpected argument "extra\nline"`},
		{env: map[string]string{"ELECTOR_RETRY_PERIOD": "1\n2"}, want: `invalid value "1\n2" for ELECTOR_RETRY_PERIOD`},
	} {
		_, err := Parse(tt.args, testEnv(tt.env, "", "h"), &bytes.Buffer{})
		var ue *UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.want) || strings.ContainsAny(err.Error(), "\n\r\u2028") {
			t.Errorf("Parse(%q) error %q, want one line containing %q", tt.args, err, tt.want)
		}
	}
}
