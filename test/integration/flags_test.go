package integration

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// Invalid flags exit 2 with one clear line naming the flag.
func TestInvalidFlagsExit2(t *testing.T) {
	base := []string{"--lease-name=x", "--identity=me", "--kubeconfig=" + env.cp.Kubeconfig, "--http-address=127.0.0.1:0"}
	tests := []struct {
		name string
		args []string
		env  []string
		want []string // the message must name one of these flags
	}{
		{"missing lease name", []string{"--identity=me", "--kubeconfig=" + env.cp.Kubeconfig}, nil, []string{"--lease-name"}},
		{"renew deadline above lease duration", append(base, "--lease-duration=2s", "--renew-deadline=3s"), nil, []string{"--renew-deadline", "--lease-duration"}},
		{"retry period too long", append(base, "--lease-duration=3s", "--renew-deadline=2s", "--retry-period=2s"), nil, []string{"--retry-period", "--renew-deadline"}},
		{"malformed duration", append(base, "--lease-duration=soon"), nil, []string{"lease-duration"}},
		{"malformed duration from env", base, []string{"ELECTOR_RENEW_DEADLINE=later"}, []string{"renew-deadline"}},
		{"bad log format", append(base, "--log-format=xml"), nil, []string{"--log-format"}},
		{"bad http address", append(base[:3:3], "--http-address=nonsense"), nil, []string{"--http-address"}},
		{"unknown flag", append(base, "--lease-durations=3s"), nil, []string{"lease-durations"}},
		{"lease labels not key=value", append(base, "--lease-labels=billing"), nil, []string{"--lease-labels"}},
		{"bad lease label key from env", base, []string{"ELECTOR_LEASE_LABELS=my team=billing"}, []string{"--lease-labels"}},
		{"kube api qps zero", append(base, "--kube-api-qps=0"), nil, []string{"--kube-api-qps"}},
		{"kube api burst zero from env", base, []string{"ELECTOR_KUBE_API_BURST=0"}, []string{"--kube-api-burst"}},
		{"http endpoint and its deprecated alias differ", append(base, "--http-endpoint=127.0.0.1:0"), []string{"ELECTOR_METRICS_ADDRESS=127.0.0.1:1"},
			[]string{"--metrics-address is a deprecated alias of --http-endpoint"}},
		{"http endpoint on the local API's address", append(base[:3:3], "--http-address=127.0.0.1:4041", "--http-endpoint=127.0.0.1:4041"), nil,
			[]string{`--http-endpoint "127.0.0.1:4041": must differ from --http-address`}},
		{"lease duration without a unit", append(base, "--lease-duration=15"), nil,
			[]string{`invalid value "15" for --lease-duration: want a duration like 15s`}},
		{"misspelt flag", append(base, "--lease-durtion=15s"), nil, []string{"unknown flag --lease-durtion: did you mean --lease-duration?"}},
		{"an alias and its flag", append(base, "--lease-duration=20s", "--leader-elect-lease-duration=20s"), nil,
			[]string{"--lease-duration and --leader-elect-lease-duration: one setting given twice"}},
		{"two aliases of one flag", append(base, "--leader-election-renew-deadline=5s", "--leader-elect-renew-deadline=5s"), nil,
			[]string{"--leader-election-renew-deadline and --leader-elect-renew-deadline: one setting given twice"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var stdout, stderr bytes.Buffer
			cmd := exec.CommandContext(ctx, env.sidecarBin, tt.args...)
			cmd.Env = append(os.Environ(), tt.env...)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := cmd.ProcessState.ExitCode()
			if code != 2 {
				t.Fatalf("exit code %d (%v), want 2; stderr:\n%s", code, err, stderr.String())
			}
			msg := strings.TrimSpace(stderr.String())
			if strings.Count(msg, "\n") != 0 || msg == "" {
				t.Errorf("stderr is not one line:\n%s", msg)
			}
			named := false
			for _, w := range tt.want {
				named = named || strings.Contains(msg, w)
			}
			if !named {
				t.Errorf("stderr %q names none of %v", msg, tt.want)
			}
		})
	}
}

// With an unreachable apiserver a sidecar reports isLeader false and answers /token with 409 or 503, never a token.
func TestUnreachableAPIServer(t *testing.T) {
	// A port where nothing listens (connection refused) and one that
	// accepts connections but never answers (a black hole).
	refused, err := framework.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	hole, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hole.Close() }()
	go func() {
		for {
			c, err := hole.Accept()
			if err != nil {
				return
			}
			defer func() { _ = c.Close() }()
		}
	}()
	for _, tc := range []struct{ name, addr string }{{"refused", refused}, {"blackhole", hole.Addr().String()}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := clientcmd.LoadFromFile(env.cp.Kubeconfig)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cfg.Clusters {
				c.Server = "https://" + tc.addr
			}
			kc := filepath.Join(t.TempDir(), "unreachable.kubeconfig")
			if err := clientcmd.WriteToFile(*cfg, kc); err != nil {
				t.Fatal(err)
			}
			g := newGroup(t, testTimings)
			g.Template.Kubeconfig = kc
			c := g.start("lonely")[0]
			// Throughout more than a lease duration (the claim is about that
			// period): never a leader, never a token.
			observe := testTimings.LeaseDuration + 2*time.Second
			statuses := map[int]int{}
			err = framework.Consistently(g.ctx, 100*time.Millisecond, observe, "no leadership with an unreachable apiserver", func(ctx context.Context) error {
				st, err := c.Leader(ctx)
				if err != nil {
					return fmt.Errorf("/leader: %w", err)
				}
				if st.IsLeader {
					return fmt.Errorf("/leader isLeader=true: %+v", st)
				}
				r := c.Token(ctx)
				if r.Err != nil {
					return fmt.Errorf("/token: %w", r.Err)
				}
				if r.Status != http.StatusConflict && r.Status != http.StatusServiceUnavailable {
					return fmt.Errorf("/token %s, want 409 or 503", r)
				}
				statuses[r.Status]++
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if code, _ := c.API.Status(g.ctx, "/healthz"); code != http.StatusOK {
				t.Errorf("/healthz %d, want 200 (the process itself is fine)", code)
			}
			code, _ := c.API.Status(g.ctx, "/readyz")
			t.Logf("over %v: /token statuses %v; /readyz %d", observe, statuses, code)
			if code == http.StatusOK {
				t.Errorf("/readyz 200 although the Lease was never observed")
			}
		})
	}
}

// -h lists every flag with two dashes and its environment variable, and
// the aliases; it exits 0.
func TestHelpListsFlagsWithTheirVariables(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, arg := range []string{"-h", "--help"} {
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, env.sidecarBin, arg)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s: %v\n%s", arg, err, out.String())
		}
		for _, want := range []string{"--lease-duration duration", "[$ELECTOR_LEASE_DURATION]", "--leader-label string", "[$ELECTOR_LEADER_LABEL]",
			"aliases: --leader-election-lease-duration, --leader-elect-lease-duration", "--version"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s output lacks %q:\n%s", arg, want, out.String())
			}
		}
	}
}

// A misspelt ELECTOR_* variable is warned about at startup (with the
// name it probably meant) instead of being ignored silently, and a
// single-dash flag works with a deprecation warning.
func TestMisspeltVariableAndSingleDashFlagAreWarned(t *testing.T) {
	g := newGroup(t, testTimings)
	g.Template.Env = []string{"ELECTOR_LEASE_DURATON=20s"}
	g.Template.ExtraArgs = []string{"-log-format=json"}
	c := g.start("speller")[0]
	wants := []string{
		`"level":"WARN","msg":"ELECTOR_LEASE_DURATON is set but no flag reads it: it is ignored; did you mean ELECTOR_LEASE_DURATION?"`,
		`"level":"WARN","msg":"-log-format: single-dash flags are deprecated; use --log-format"`,
	}
	err := framework.Eventually(g.ctx, 100*time.Millisecond, 20*time.Second, "the startup warnings", func(context.Context) error {
		for _, w := range wants {
			if !strings.Contains(c.Logs(), w) {
				return fmt.Errorf("log lacks %s; log tail:\n%s", w, c.LogTail(5))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// It still elects: the warnings change nothing else.
	g.waitLeader(startupTimeout)
}
