package sidecar

import (
	"errors"
	"flag"
	"os"
	"strings"
	"testing"
	"time"
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
	}{
		{name: "defaults", args: []string{"--lease-name=billing"}, host: "host-1", check: func(t *testing.T, c *Config) {
			want := Config{LeaseName: "billing", LeaseNamespace: "default", Identity: "host-1", LeaseDuration: 15 * time.Second,
				RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second, ClockSkewMargin: 500 * time.Millisecond,
				HTTPAddress: "127.0.0.1:4040", LogFormat: "text", LogLevel: "info"}
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
			"ELECTOR_CLOCK_SKEW_MARGIN": "100ms", "ELECTOR_HTTP_ADDRESS": "127.0.0.1:5050", "ELECTOR_METRICS_ADDRESS": ":9090",
			"ELECTOR_KUBECONFIG": "/k", "ELECTOR_LOG_FORMAT": "json", "ELECTOR_LOG_LEVEL": "debug", "POD_NAME": "ignored"},
			check: func(t *testing.T, c *Config) {
				want := Config{LeaseName: "l", LeaseNamespace: "ns", Identity: "me", LeaseDuration: 3 * time.Second,
					RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond, ClockSkewMargin: 100 * time.Millisecond,
					HTTPAddress: "127.0.0.1:5050", MetricsAddress: ":9090", Kubeconfig: "/k", LogFormat: "json", LogLevel: "debug"}
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
		{name: "unknown flag", args: []string{"--leese-name=l"}, wantErr: "flag provided but not defined: -leese-name"},
		{name: "stray argument", args: []string{"--lease-name=l", "extra"}, host: "h", wantErr: `unexpected argument "extra"`},
		{name: "bad duration flag", args: []string{"--lease-name=l", "--lease-duration=soon"}, host: "h", wantErr: `invalid value "soon" for flag -lease-duration`},
		{name: "bad duration env", env: map[string]string{"ELECTOR_RETRY_PERIOD": "x"}, wantErr: `invalid value "x" for ELECTOR_RETRY_PERIOD (--retry-period)`},
		{name: "lease not above deadline", args: []string{"--lease-name=l", "--lease-duration=10s"}, host: "h", wantErr: "--lease-duration 10s: must be greater than renew deadline 10s"},
		{name: "deadline vs retry", args: []string{"--lease-name=l", "--retry-period=9s"}, host: "h", wantErr: "--renew-deadline 10s: must be greater than 1.2 x retry period 9s"},
		{name: "margin too big", args: []string{"--lease-name=l", "--clock-skew-margin=14s"}, host: "h", wantErr: "--clock-skew-margin 14s"},
		{name: "bad lease name", args: []string{"--lease-name=Bad_Name"}, host: "h", wantErr: `--lease-name "Bad_Name"`},
		{name: "bad log format", args: []string{"--lease-name=l", "--log-format=xml"}, host: "h", wantErr: `--log-format "xml": must be text or json`},
		{name: "bad log level", args: []string{"--lease-name=l", "--log-level=loud"}, host: "h", wantErr: `--log-level "loud"`},
		{name: "bad http address", args: []string{"--lease-name=l", "--http-address=4040"}, host: "h", wantErr: `--http-address "4040": want host:port`},
		{name: "bad http port", args: []string{"--lease-name=l", "--http-address=127.0.0.1:99999"}, host: "h", wantErr: `--http-address "127.0.0.1:99999": invalid port`},
		{name: "hostname in address", args: []string{"--lease-name=l", "--http-address=example.com:80"}, host: "h", wantErr: "host must be an IP address"},
		{name: "same metrics address", args: []string{"--lease-name=l", "--metrics-address=127.0.0.1:4040"}, host: "h", wantErr: "must differ from --http-address"},
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
		if !strings.Contains(out.String(), "-"+f.name) {
			t.Errorf("usage does not mention -%s", f.name)
		}
	}
}
