package sidecar

import (
	"errors"
	"flag"
	"maps"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
)

func testEnv(vars map[string]string, saNamespace, hostname string) Env {
	return Env{
		Getenv: func(k string) string { return vars[k] },
		ReadFile: func(p string) ([]byte, error) {
			if p == ServiceAccountNamespaceFile && saNamespace != "" {
				return []byte(saNamespace + "\n"), nil
			}
			return nil, os.ErrNotExist
		},
		Hostname: func() (string, error) {
			if hostname == "" {
				return "", errors.New("no hostname")
			}
			return hostname, nil
		},
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		saNS    string
		host    string
		check   func(*testing.T, *Config)
		wantErr string
		exact   bool   // wantErr is the whole message
		path    string // the election field path the error wraps, if any
	}{
		{name: "defaults", args: []string{"--lease-name=billing"}, host: "host-1", check: func(t *testing.T, c *Config) {
			want := Config{LeaseName: "billing", LeaseNamespace: "default", Identity: "host-1", LeaseDuration: 15 * time.Second,
				RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second, ClockSkewMargin: 500 * time.Millisecond,
				HTTPAddress: "127.0.0.1:4040", LogFormat: "text", LogLevel: "info",
				AppHealthPeriod: 2 * time.Second, AppHealthTimeout: time.Second, AppHealthFailureThreshold: 3, AppHealthSuccessThreshold: 1,
				KubeAPIQPS: 50, KubeAPIBurst: 100, ShutdownHandoff: "after-validity", DirectHandoff: true}
			if *c != want {
				t.Fatalf("got %+v\nwant %+v", *c, want)
			}
		}},
		{name: "pod env", args: []string{"--lease-name=l"}, env: map[string]string{"POD_NAMESPACE": "team", "POD_NAME": "pod-7", "KUBECONFIG": "/kc"}, saNS: "sa-ns", host: "h",
			check: func(t *testing.T, c *Config) {
				if c.LeaseNamespace != "team" || c.Identity != "pod-7" || c.Kubeconfig != "/kc" {
					t.Fatalf("%+v", c)
				}
			}},
		{name: "service account namespace", args: []string{"--lease-name=l"}, saNS: "sa-ns", host: "h", check: func(t *testing.T, c *Config) {
			if c.LeaseNamespace != "sa-ns" {
				t.Fatalf("namespace %q", c.LeaseNamespace)
			}
		}},
		{name: "env vars for every flag", env: map[string]string{
			"ELECTOR_LEASE_NAME": "l", "ELECTOR_LEASE_NAMESPACE": "ns", "ELECTOR_IDENTITY": "me",
			"ELECTOR_LEASE_DURATION": "3s", "ELECTOR_RENEW_DEADLINE": "2s", "ELECTOR_RETRY_PERIOD": "500ms",
			"ELECTOR_CLOCK_SKEW_MARGIN": "100ms", "ELECTOR_HTTP_ADDRESS": "127.0.0.1:5050", "ELECTOR_HTTP_ENDPOINT": ":9090", "ELECTOR_METRICS_ADDRESS": ":9090",
			"ELECTOR_KUBECONFIG": "/k", "ELECTOR_LOG_FORMAT": "json", "ELECTOR_LOG_LEVEL": "debug", "POD_NAME": "ignored",
			"ELECTOR_APP_HEALTH_URL": "http://localhost:8080/healthz", "ELECTOR_APP_HEALTH_PERIOD": "5s", "ELECTOR_APP_HEALTH_TIMEOUT": "3s",
			"ELECTOR_APP_HEALTH_FAILURE_THRESHOLD": "2", "ELECTOR_APP_HEALTH_SUCCESS_THRESHOLD": "4",
			"ELECTOR_LEADER_LABEL": "example.com/leader", "ELECTOR_LEADER_LABEL_SELECTOR": "app.kubernetes.io/instance=billing", "ELECTOR_LEASE_LABELS": "app.kubernetes.io/instance=billing",
			"ELECTOR_KUBE_API_QPS": "2.5", "ELECTOR_KUBE_API_BURST": "7", "ELECTOR_EXPECTED_CANDIDATES": "5", "ELECTOR_SHUTDOWN_HANDOFF": "immediate", "ELECTOR_DIRECT_HANDOFF": "false"},
			check: func(t *testing.T, c *Config) {
				want := Config{LeaseName: "l", LeaseNamespace: "ns", Identity: "me", LeaseDuration: 3 * time.Second,
					RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond, ClockSkewMargin: 100 * time.Millisecond,
					HTTPAddress: "127.0.0.1:5050", HTTPEndpoint: ":9090", MetricsAddress: ":9090", Kubeconfig: "/k", LogFormat: "json", LogLevel: "debug",
					AppHealthURL: "http://localhost:8080/healthz", AppHealthPeriod: 5 * time.Second, AppHealthTimeout: 3 * time.Second,
					AppHealthFailureThreshold: 2, AppHealthSuccessThreshold: 4, LeaderLabel: "example.com/leader", LeaderLabelSelector: "app.kubernetes.io/instance=billing",
					LeaseLabels: "app.kubernetes.io/instance=billing", KubeAPIQPS: 2.5, KubeAPIBurst: 7, ExpectedCandidates: 5, ShutdownHandoff: "immediate", DirectHandoff: false}
				if *c != want {
					t.Fatalf("got %+v\nwant %+v", *c, want)
				}
			}},
		{name: "flag beats env", args: []string{"--lease-name=flag"}, env: map[string]string{"ELECTOR_LEASE_NAME": "env"}, host: "h",
			check: func(t *testing.T, c *Config) {
				if c.LeaseName != "flag" {
					t.Fatalf("lease name %q", c.LeaseName)
				}
			}},
		{name: "version needs nothing else", args: []string{"--version"}, check: func(t *testing.T, c *Config) {
			if !c.ShowVersion {
				t.Fatal("ShowVersion not set")
			}
		}},
		{name: "missing lease name", host: "h", wantErr: "--lease-name is required"},
		{name: "no identity", args: []string{"--lease-name=l"}, wantErr: "--identity is empty"},
		{name: "unknown flag", args: []string{"--leese-name=l"}, wantErr: "unknown flag --leese-name: did you mean --lease-name? elector-sidecar --help lists every flag", exact: true},
		{name: "stray argument", args: []string{"--lease-name=l", "extra"}, host: "h", wantErr: `unexpected argument "extra"`},
		{name: "bad duration flag", args: []string{"--lease-name=l", "--lease-duration=soon"}, host: "h", wantErr: `invalid value "soon" for --lease-duration: want a duration like 15s (a number with a unit: ms, s, m, h)`, exact: true},
		{name: "bad duration env", env: map[string]string{"ELECTOR_RETRY_PERIOD": "x"}, wantErr: `invalid value "x" for ELECTOR_RETRY_PERIOD (--retry-period): want a duration like 2s`},
		{name: "lease not above deadline", args: []string{"--lease-name=l", "--lease-duration=10s"}, host: "h", wantErr: "--lease-duration 10s: must be greater than renew deadline 10s", exact: true, path: "leaseDuration"},
		{name: "deadline vs retry", args: []string{"--lease-name=l", "--retry-period=9s"}, host: "h", wantErr: "--renew-deadline 10s: must be greater than 1.2 x retry period 9s", path: "renewDeadline"},
		{name: "margin too big", args: []string{"--lease-name=l", "--clock-skew-margin=14s"}, host: "h", wantErr: "--clock-skew-margin 14s", path: "clockSkewMargin"},
		{name: "bad lease name", args: []string{"--lease-name=Bad_Name"}, host: "h", wantErr: `--lease-name "Bad_Name": `, path: "leaseName"},
		{name: "namespace with a dot", args: []string{"--lease-name=l", "--lease-namespace=a.b"}, host: "h", wantErr: `--lease-namespace "a.b": must not contain dots`, path: "leaseNamespace"},
		{name: "blank identity", args: []string{"--lease-name=l", "--identity= "}, wantErr: `--identity " ": must not be blank`, path: "identity"},
		{name: "zero retry period", args: []string{"--lease-name=l", "--retry-period=0"}, host: "h", wantErr: "--retry-period 0s: must be positive", path: "retryPeriod"},
		{name: "negative margin from env", args: []string{"--lease-name=l"}, env: map[string]string{"ELECTOR_CLOCK_SKEW_MARGIN": "-1s"}, host: "h", wantErr: "--clock-skew-margin -1s: must not be negative", path: "clockSkewMargin"},
		{name: "sub-second lease", args: []string{"--lease-name=l", "--lease-duration=900ms", "--renew-deadline=500ms", "--retry-period=100ms", "--clock-skew-margin=0"}, host: "h", wantErr: "--lease-duration 900ms: must be at least 1s", path: "leaseDuration"},
		{name: "bad log format", args: []string{"--lease-name=l", "--log-format=xml"}, host: "h", wantErr: `--log-format "xml": must be text or json`},
		{name: "bad log level", args: []string{"--lease-name=l", "--log-level=loud"}, host: "h", wantErr: `--log-level "loud"`},
		{name: "bad http address", args: []string{"--lease-name=l", "--http-address=4040"}, host: "h", wantErr: `--http-address "4040": want host:port`},
		{name: "bad http port", args: []string{"--lease-name=l", "--http-address=127.0.0.1:99999"}, host: "h", wantErr: `--http-address "127.0.0.1:99999": invalid port`},
		{name: "hostname in address", args: []string{"--lease-name=l", "--http-address=example.com:80"}, host: "h", wantErr: "host must be an IP address"},
		{name: "same metrics address", args: []string{"--lease-name=l", "--metrics-address=127.0.0.1:4040"}, host: "h", wantErr: `--metrics-address "127.0.0.1:4040": must differ from --http-address`},
		{name: "http endpoint on the local API's address", args: []string{"--lease-name=l", "--http-address=127.0.0.1:5050", "--http-endpoint=127.0.0.1:5050"}, host: "h",
			wantErr: `--http-endpoint "127.0.0.1:5050": must differ from --http-address`},
		{name: "http endpoint not host:port", args: []string{"--lease-name=l", "--http-endpoint=9090"}, host: "h", wantErr: `--http-endpoint "9090": want host:port`},
		{name: "http endpoint with a host name", env: map[string]string{"ELECTOR_LEASE_NAME": "l", "ELECTOR_HTTP_ENDPOINT": "pod.local:9090"}, host: "h", wantErr: `--http-endpoint "pod.local:9090": host must be an IP address`},
		{name: "metrics address not host:port", args: []string{"--lease-name=l", "--metrics-address=:x:"}, host: "h", wantErr: `--metrics-address ":x:": want host:port`},
		{name: "http endpoint and its alias differ", args: []string{"--lease-name=l", "--http-endpoint=:9090", "--metrics-address=:9091"}, host: "h",
			wantErr: `--http-endpoint ":9090" and --metrics-address ":9091": --metrics-address is a deprecated alias of --http-endpoint; set only --http-endpoint`, exact: true},
		{name: "http endpoint flag and alias env differ", args: []string{"--lease-name=l", "--http-endpoint=:9090"}, env: map[string]string{"ELECTOR_METRICS_ADDRESS": ":9090 "}, host: "h",
			wantErr: `--metrics-address is a deprecated alias of --http-endpoint`},
		{name: "http endpoint", args: []string{"--lease-name=l", "--http-endpoint=:9090"}, host: "h", check: func(t *testing.T, c *Config) {
			if c.HTTPEndpoint != ":9090" || c.DiagnosticsAddress() != ":9090" || len(c.Deprecations()) != 0 {
				t.Fatalf("endpoint %q, diagnostics %q, deprecations %q", c.HTTPEndpoint, c.DiagnosticsAddress(), c.Deprecations())
			}
		}},
		{name: "no http endpoint by default", args: []string{"--lease-name=l"}, host: "h", check: func(t *testing.T, c *Config) {
			if c.DiagnosticsAddress() != "" || len(c.Deprecations()) != 0 {
				t.Fatalf("diagnostics %q, deprecations %q", c.DiagnosticsAddress(), c.Deprecations())
			}
		}},
		{name: "metrics address is the deprecated alias", env: map[string]string{"ELECTOR_LEASE_NAME": "l", "ELECTOR_METRICS_ADDRESS": "0.0.0.0:9091"}, host: "h", check: func(t *testing.T, c *Config) {
			d := c.Deprecations()
			if c.DiagnosticsAddress() != "0.0.0.0:9091" || len(d) != 1 || !strings.Contains(d[0], "--metrics-address (ELECTOR_METRICS_ADDRESS) is deprecated: use --http-endpoint (ELECTOR_HTTP_ENDPOINT)") {
				t.Fatalf("diagnostics %q, deprecations %q", c.DiagnosticsAddress(), d)
			}
		}},
		{name: "http endpoint and its alias alike", args: []string{"--lease-name=l", "--http-endpoint=:9090", "--metrics-address=:9090"}, host: "h", check: func(t *testing.T, c *Config) {
			if c.DiagnosticsAddress() != ":9090" || len(c.Deprecations()) != 1 {
				t.Fatalf("diagnostics %q, deprecations %q", c.DiagnosticsAddress(), c.Deprecations())
			}
		}},
		{name: "app health on ipv4 loopback", args: []string{"--lease-name=l", "--app-health-url=http://127.0.0.1:8080/healthz?full=1"}, host: "h", check: func(t *testing.T, c *Config) {
			if c.AppHealthURL != "http://127.0.0.1:8080/healthz?full=1" {
				t.Fatalf("app health URL %q", c.AppHealthURL)
			}
		}},
		{name: "app health on ipv6 loopback", args: []string{"--lease-name=l", "--app-health-url=http://[::1]:8080/"}, host: "h", check: func(t *testing.T, c *Config) {
			if c.AppHealthURL != "http://[::1]:8080/" {
				t.Fatalf("app health URL %q", c.AppHealthURL)
			}
		}},
		{name: "app health url not loopback", args: []string{"--lease-name=l", "--app-health-url=http://10.0.0.7:8080/healthz"}, host: "h", wantErr: `--app-health-url "http://10.0.0.7:8080/healthz": host must be loopback`},
		{name: "app health url a service name", args: []string{"--lease-name=l", "--app-health-url=http://app.team.svc:8080/healthz"}, host: "h", wantErr: `--app-health-url "http://app.team.svc:8080/healthz": host must be loopback`},
		{name: "app health url 0.0.0.0", args: []string{"--lease-name=l", "--app-health-url=http://0.0.0.0:8080/healthz"}, host: "h", wantErr: "host must be loopback"},
		{name: "app health url https", args: []string{"--lease-name=l", "--app-health-url=https://127.0.0.1:8443/healthz"}, host: "h", wantErr: "scheme must be http"},
		{name: "app health url without scheme", args: []string{"--lease-name=l", "--app-health-url=127.0.0.1:8080/healthz"}, host: "h", wantErr: `--app-health-url "127.0.0.1:8080/healthz": `},
		{name: "app health url without port", args: []string{"--lease-name=l", "--app-health-url=http://localhost/healthz"}, host: "h", wantErr: "needs a port 1-65535"},
		{name: "app health url port 0", args: []string{"--lease-name=l", "--app-health-url=http://localhost:0/healthz"}, host: "h", wantErr: "needs a port 1-65535"},
		{name: "app health url port too big", args: []string{"--lease-name=l", "--app-health-url=http://localhost:70000/healthz"}, host: "h", wantErr: "needs a port 1-65535"},
		{name: "app health url without path", args: []string{"--lease-name=l", "--app-health-url=http://localhost:8080"}, host: "h", wantErr: "needs a path"},
		{name: "app health url with user", args: []string{"--lease-name=l", "--app-health-url=http://u:p@localhost:8080/healthz"}, host: "h", wantErr: "must not carry user info"},
		{name: "app health url with fragment", args: []string{"--lease-name=l", "--app-health-url=http://localhost:8080/healthz#x"}, host: "h", wantErr: "must not have a fragment"},
		{name: "app health url unparsable", args: []string{"--lease-name=l", "--app-health-url=http://local host:8080/%zz"}, host: "h", wantErr: "not a URL"},
		{name: "app health url from env", env: map[string]string{"ELECTOR_LEASE_NAME": "l", "ELECTOR_APP_HEALTH_URL": "http://example.com:80/healthz"}, host: "h", wantErr: `--app-health-url "http://example.com:80/healthz"`},
		{name: "app health period zero", args: []string{"--lease-name=l", "--app-health-period=0"}, host: "h", wantErr: "--app-health-period 0s: must be positive", exact: true},
		{name: "app health period negative", args: []string{"--lease-name=l", "--app-health-period=-2s"}, host: "h", wantErr: "--app-health-period -2s: must be positive"},
		{name: "app health period not a duration", args: []string{"--lease-name=l", "--app-health-period=2"}, host: "h", wantErr: `invalid value "2" for --app-health-period: want a duration like 2s`},
		{name: "app health timeout zero", args: []string{"--lease-name=l", "--app-health-timeout=0s"}, host: "h", wantErr: "--app-health-timeout 0s: must be positive"},
		{name: "app health timeout equals period", args: []string{"--lease-name=l", "--app-health-timeout=2s"}, host: "h", wantErr: "--app-health-timeout 2s: must be less than --app-health-period 2s", exact: true},
		{name: "app health timeout above period from env", args: []string{"--lease-name=l"}, env: map[string]string{"ELECTOR_APP_HEALTH_PERIOD": "500ms"}, host: "h", wantErr: "--app-health-timeout 1s: must be less than --app-health-period 500ms"},
		{name: "app health failure threshold zero", args: []string{"--lease-name=l", "--app-health-failure-threshold=0"}, host: "h", wantErr: "--app-health-failure-threshold 0: must be at least 1", exact: true},
		{name: "app health failure threshold negative", args: []string{"--lease-name=l", "--app-health-failure-threshold=-1"}, host: "h", wantErr: "--app-health-failure-threshold -1: must be at least 1"},
		{name: "app health failure threshold not a number", env: map[string]string{"ELECTOR_APP_HEALTH_FAILURE_THRESHOLD": "three"}, wantErr: `invalid value "three" for ELECTOR_APP_HEALTH_FAILURE_THRESHOLD (--app-health-failure-threshold)`},
		{name: "app health success threshold zero", args: []string{"--lease-name=l", "--app-health-success-threshold=0"}, host: "h", wantErr: "--app-health-success-threshold 0: must be at least 1", exact: true},
		{name: "app health success threshold not a number", args: []string{"--lease-name=l", "--app-health-success-threshold=1.5"}, host: "h", wantErr: `invalid value "1.5" for --app-health-success-threshold: want a whole number like 1`},
		{name: "leader label: the chart's key", args: []string{"--lease-name=l", "--leader-label=elector-sidecar.io/leader"}, host: "h", check: func(t *testing.T, c *Config) {
			if c.LeaderLabel != "elector-sidecar.io/leader" {
				t.Fatalf("leader label %q", c.LeaderLabel)
			}
		}},
		{name: "leader label without a prefix", args: []string{"--lease-name=l", "--leader-label=leader"}, host: "h", check: func(t *testing.T, c *Config) {
			if c.LeaderLabel != "leader" {
				t.Fatalf("leader label %q", c.LeaderLabel)
			}
		}},
		{name: "leader label empty is off", args: []string{"--lease-name=l", "--leader-label="}, host: "h", check: func(t *testing.T, c *Config) {
			if c.LeaderLabel != "" {
				t.Fatalf("leader label %q", c.LeaderLabel)
			}
		}},
		{name: "leader label with a space", args: []string{"--lease-name=l", "--leader-label=my leader"}, host: "h", wantErr: `--leader-label "my leader": not a valid label key: name part must consist of alphanumeric characters`},
		{name: "leader label with two slashes", args: []string{"--lease-name=l", "--leader-label=a/b/c"}, host: "h", wantErr: `--leader-label "a/b/c": not a valid label key: a valid label key must consist of`},
		{name: "leader label with an upper-case prefix", args: []string{"--lease-name=l", "--leader-label=Example.com/leader"}, host: "h", wantErr: `--leader-label "Example.com/leader": not a valid label key: prefix part a lowercase RFC 1123 subdomain`},
		{name: "leader label name too long", args: []string{"--lease-name=l", "--leader-label=" + strings.Repeat("x", 64)}, host: "h", wantErr: "name part must be no more than 63 bytes"},
		{name: "leader label empty name", args: []string{"--lease-name=l", "--leader-label=example.com/"}, host: "h", wantErr: `--leader-label "example.com/": not a valid label key: name part must be non-empty`},
		{name: "leader label from env", env: map[string]string{"ELECTOR_LEASE_NAME": "l", "ELECTOR_LEADER_LABEL": "-leader"}, host: "h", wantErr: `--leader-label "-leader": not a valid label key`},
		{name: "leader label selector not a selector", args: []string{"--lease-name=l", "--leader-label=k", "--leader-label-selector=a=b=c"}, host: "h",
			wantErr: `--leader-label-selector "a=b=c": not a label selector: `},
		{name: "lease labels: the chart's", args: []string{"--lease-name=l", "--lease-labels=app.kubernetes.io/name=elector-sidecar,app.kubernetes.io/instance=billing"}, host: "h", check: func(t *testing.T, c *Config) {
			want := map[string]string{"app.kubernetes.io/name": "elector-sidecar", "app.kubernetes.io/instance": "billing"}
			if got := c.ElectionConfig().LeaseLabels; !maps.Equal(got, want) {
				t.Fatalf("lease labels %v, want %v", got, want)
			}
		}},
		{name: "lease labels: spaces around pairs, an empty value", args: []string{"--lease-name=l", "--lease-labels= team = billing , tier= "}, host: "h", check: func(t *testing.T, c *Config) {
			want := map[string]string{"team": "billing", "tier": ""}
			if got := c.ElectionConfig().LeaseLabels; !maps.Equal(got, want) {
				t.Fatalf("lease labels %v, want %v", got, want)
			}
		}},
		{name: "lease labels empty: none", args: []string{"--lease-name=l", "--lease-labels="}, host: "h", check: func(t *testing.T, c *Config) {
			if got := c.ElectionConfig().LeaseLabels; got != nil {
				t.Fatalf("lease labels %v, want none", got)
			}
		}},
		{name: "lease labels: a value with = in it", args: []string{"--lease-name=l", "--lease-labels=a=b=c"}, host: "h", wantErr: `--lease-labels "a=b=c": invalid label value: `, path: "leaseLabels"},
		{name: "lease labels: no =", args: []string{"--lease-name=l", "--lease-labels=billing"}, host: "h",
			wantErr: `--lease-labels "billing": "billing" is not key=value; want key=value pairs separated by commas (e.g. app.kubernetes.io/instance=billing)`, exact: true},
		{name: "lease labels: empty key", args: []string{"--lease-name=l", "--lease-labels==billing"}, host: "h", wantErr: `--lease-labels "=billing": "=billing" is not key=value`},
		{name: "lease labels: trailing comma", args: []string{"--lease-name=l", "--lease-labels=a=b,"}, host: "h", wantErr: `--lease-labels "a=b,": "" is not key=value`},
		{name: "lease labels: key twice", args: []string{"--lease-name=l", "--lease-labels=a=b,a=c"}, host: "h", wantErr: `--lease-labels "a=b,a=c": key "a" is given twice`, exact: true},
		{name: "lease labels: bad key", args: []string{"--lease-name=l", "--lease-labels=my team=billing"}, host: "h", wantErr: `--lease-labels "my team=billing": invalid label key: name part must consist of alphanumeric characters`, path: "leaseLabels"},
		{name: "lease labels: bad prefix", args: []string{"--lease-name=l", "--lease-labels=Example.com/team=billing"}, host: "h", wantErr: `--lease-labels "Example.com/team=billing": invalid label key: prefix part`, path: "leaseLabels"},
		{name: "lease labels: value too long", args: []string{"--lease-name=l", "--lease-labels=team=" + strings.Repeat("v", 64)}, host: "h", wantErr: "invalid label value: must be no more than 63 bytes", path: "leaseLabels"},
		{name: "lease labels: bad value from env", env: map[string]string{"ELECTOR_LEASE_NAME": "l", "ELECTOR_LEASE_LABELS": "team=-billing"}, host: "h", wantErr: `--lease-labels "team=-billing": invalid label value: `, path: "leaseLabels"},
		{name: "kube api qps fractional", args: []string{"--lease-name=l", "--kube-api-qps=0.5", "--kube-api-burst=1"}, host: "h", check: func(t *testing.T, c *Config) {
			if c.KubeAPIQPS != 0.5 || c.KubeAPIBurst != 1 {
				t.Fatalf("qps %v burst %d", c.KubeAPIQPS, c.KubeAPIBurst)
			}
		}},
		{name: "kube api qps zero", args: []string{"--lease-name=l", "--kube-api-qps=0"}, host: "h", wantErr: "--kube-api-qps 0: must be a positive number", exact: true},
		{name: "kube api qps negative", args: []string{"--lease-name=l", "--kube-api-qps=-5"}, host: "h", wantErr: "--kube-api-qps -5: must be a positive number", exact: true},
		{name: "kube api qps NaN", args: []string{"--lease-name=l", "--kube-api-qps=NaN"}, host: "h", wantErr: "--kube-api-qps NaN: must be a positive number", exact: true},
		{name: "kube api qps infinite", args: []string{"--lease-name=l", "--kube-api-qps=Inf"}, host: "h", wantErr: "--kube-api-qps +Inf: must be a positive number", exact: true},
		{name: "kube api qps beyond float32", args: []string{"--lease-name=l", "--kube-api-qps=1e39"}, host: "h", wantErr: "--kube-api-qps 1e+39: must be a positive number", exact: true},
		{name: "kube api qps not a number", env: map[string]string{"ELECTOR_KUBE_API_QPS": "fast"}, wantErr: `invalid value "fast" for ELECTOR_KUBE_API_QPS (--kube-api-qps)`},
		{name: "kube api burst zero", args: []string{"--lease-name=l", "--kube-api-burst=0"}, host: "h", wantErr: "--kube-api-burst 0: must be at least 1", exact: true},
		{name: "kube api burst negative from env", args: []string{"--lease-name=l"}, env: map[string]string{"ELECTOR_KUBE_API_BURST": "-1"}, host: "h", wantErr: "--kube-api-burst -1: must be at least 1", exact: true},
		{name: "expected candidates reach the election", args: []string{"--lease-name=l", "--expected-candidates=100"}, host: "h", check: func(t *testing.T, c *Config) {
			if got := c.ElectionConfig().ExpectedCandidates; got != 100 {
				t.Fatalf("election ExpectedCandidates %d, want 100", got)
			}
		}},
		{name: "expected candidates negative", args: []string{"--lease-name=l", "--expected-candidates=-1"}, host: "h", wantErr: "--expected-candidates -1: must be between 0 (unknown) and 100000", exact: true, path: "expectedCandidates"},
		{name: "expected candidates too many from env", args: []string{"--lease-name=l"}, env: map[string]string{"ELECTOR_EXPECTED_CANDIDATES": "100001"}, host: "h", wantErr: "--expected-candidates 100001: must be between 0 (unknown) and 100000", exact: true, path: "expectedCandidates"},
		{name: "shutdown handoff reaches the election", args: []string{"--lease-name=l", "--shutdown-handoff=immediate"}, host: "h", check: func(t *testing.T, c *Config) {
			if got := c.ElectionConfig().ShutdownHandoff; got != election.HandoffImmediate {
				t.Fatalf("election ShutdownHandoff %q, want immediate", got)
			}
		}},
		{name: "shutdown handoff unknown", args: []string{"--lease-name=l", "--shutdown-handoff=later"}, host: "h", wantErr: `--shutdown-handoff later: supported values: "after-validity", "immediate"`, exact: true, path: "shutdownHandoff"},
		{name: "expected candidates not an integer", args: []string{"--lease-name=l", "--expected-candidates=three"}, host: "h", wantErr: `invalid value "three" for --expected-candidates: want a whole number like 0`},
		{name: "kube api burst not an integer", args: []string{"--lease-name=l", "--kube-api-burst=1.5"}, host: "h", wantErr: `invalid value "1.5" for --kube-api-burst: want a whole number like 100`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var usage strings.Builder
			c, err := Parse(tt.args, testEnv(tt.env, tt.saNS, tt.host), &usage)
			if usage.Len() > 0 {
				t.Fatalf("Parse wrote usage text for %v: %q", tt.args, usage.String())
			}
			if tt.wantErr != "" {
				var ue *UsageError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse error = %v, want a UsageError containing %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "\n") {
					t.Fatalf("error is not one line: %q", err)
				}
				var fe *field.Error
				if isField := errors.As(err, &fe); isField != (tt.path != "") || (isField && fe.Field != tt.path) {
					t.Fatalf("Parse error %v wraps field error %v, want path %q", err, fe, tt.path)
				}
				if tt.exact && err.Error() != tt.wantErr {
					t.Fatalf("Parse error = %q, want exactly %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			tt.check(t, c)
		})
	}
}

func TestParseHelp(t *testing.T) {
	var out strings.Builder
	if _, err := Parse([]string{"-h"}, testEnv(nil, "", "h"), &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("Parse(-h) = %v, want flag.ErrHelp", err)
	}
	for _, f := range Flags {
		if !strings.Contains(out.String(), "--"+f.name+" ") || !strings.Contains(out.String(), "[$"+f.env+"]") {
			t.Errorf("usage does not list --%s with [$%s]", f.name, f.env)
		}
	}
	for _, a := range Aliases {
		if !strings.Contains(out.String(), "--"+a.name) {
			t.Errorf("usage does not list the alias --%s", a.name)
		}
	}
}

// badElectionConfigs returns election configs that each break one field of
// a valid one: every string and duration field (and any other plain field
// added later) gets empty, blank, malformed, negative and huge values. So a
// new validation rule on any field is triggered here without editing this
// test.
func badElectionConfigs(t *testing.T) []election.Config {
	t.Helper()
	c, err := Parse([]string{"--lease-name=l"}, testEnv(nil, "", "h"), nil)
	if err != nil {
		t.Fatal(err)
	}
	valid := c.ElectionConfig()
	if errs := valid.Validate(); len(errs) > 0 {
		t.Fatalf("defaults are invalid: %v", errs.ToAggregate())
	}
	var out []election.Config
	typ := reflect.TypeFor[election.Config]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if !f.IsExported() {
			continue
		}
		var bad []any
		switch {
		case f.Type == reflect.TypeFor[time.Duration]():
			for _, d := range []time.Duration{math.MinInt64, -time.Second, -1, 0, 1, time.Millisecond, 999 * time.Millisecond, time.Second, 10 * time.Second, time.Hour, math.MaxInt64} {
				bad = append(bad, d)
			}
		case f.Type.Kind() == reflect.String:
			for _, s := range []string{"", " ", "Bad_Name", "a.b", "a/b", strings.Repeat("a", 300)} {
				bad = append(bad, s)
			}
		case f.Type.Kind() >= reflect.Int && f.Type.Kind() <= reflect.Float64:
			for _, n := range []int64{math.MinInt32, -1, 0, 1, math.MaxInt32} {
				bad = append(bad, reflect.ValueOf(n).Convert(f.Type).Interface())
			}
		case f.Type.Kind() == reflect.Bool:
			bad = append(bad, true, false)
		case f.Type == reflect.TypeFor[map[string]string]():
			for _, m := range []map[string]string{{"": "v"}, {"a b": "v"}, {"a/b/c": "v"}, {"k": "-v"}, {"k": strings.Repeat("v", 64)}} {
				bad = append(bad, m)
			}
		default:
			// Dependencies (client, clock, logger, ...), not settings.
			continue
		}
		for _, v := range bad {
			ec := valid
			reflect.ValueOf(&ec).Elem().Field(i).Set(reflect.ValueOf(v).Convert(f.Type))
			out = append(out, ec)
		}
	}
	return out
}

// TestElectionFieldsHaveFlags: every field path the election reports has a
// flag, every mapped path is one the election reports, and every mapped
// flag exists.
func TestElectionFieldsHaveFlags(t *testing.T) {
	registered := map[string]bool{}
	newFlagSet(&Config{}).VisitAll(func(f *pflag.Flag) { registered[f.Name] = true })
	for path, name := range electionFlags {
		if !registered[name] {
			t.Errorf("electionFlags maps %s to --%s, which Parse does not register", path, name)
		}
	}
	seen := map[string]bool{}
	for _, ec := range badElectionConfigs(t) {
		for _, fe := range ec.Validate() {
			seen[fe.Field] = true
			name, ok := electionFlags[fe.Field]
			if !ok {
				t.Errorf("election field %s has no flag in electionFlags (error: %v)", fe.Field, fe)
				continue
			}
			err := flagError(fe)
			var got *field.Error
			if !errors.As(err, &got) || got != fe {
				t.Errorf("flagError(%v) does not unwrap to the field error", fe)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "--"+name+" ") && !strings.HasPrefix(msg, "--"+name+":") {
				t.Errorf("flagError(%v) = %q, want it to start with --%s", fe, msg, name)
			}
			if strings.Contains(msg, "\n") || (fe.Field != name && strings.Contains(msg, fe.Field)) {
				t.Errorf("flagError(%v) = %q: not one line, or names the election field instead of the flag", fe, msg)
			}
		}
	}
	for path := range electionFlags {
		if !seen[path] {
			t.Errorf("electionFlags maps %s, which no invalid election config reports", path)
		}
	}
}

// TestFlagErrorValues: strings are quoted, durations print as durations,
// required fields name the env var too.
func TestFlagErrorValues(t *testing.T) {
	tests := []struct {
		err  *field.Error
		want string
	}{
		{field.Invalid(field.NewPath("leaseName"), "Bad_Name", "x"), `--lease-name "Bad_Name": x`},
		{field.Invalid(field.NewPath("leaseDuration"), metav1.Duration{Duration: 10 * time.Second}, "x"), `--lease-duration 10s: x`},
		{field.Required(field.NewPath("leaseNamespace"), ""), `--lease-namespace is required (or ELECTOR_LEASE_NAMESPACE)`},
	}
	for _, tt := range tests {
		if got := flagError(tt.err).Error(); got != tt.want {
			t.Errorf("flagError(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}
