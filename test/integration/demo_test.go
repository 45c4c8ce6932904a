package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// demoPackage is `make demo`'s program (hack/demo.sh builds and runs it).
const demoPackage = "./test/cmd/demo"

// demoCommand is a command the demo printed, with its output and the leader
// the demo's timeline had announced last before it.
type demoCommand struct {
	command string
	output  []string // non-empty lines, indentation removed
	leader  string
	token   int64
}

var (
	demoLeads    = regexp.MustCompile(`★ (\S+) leads: its sidecar serves fencing token (\d+)$`)
	demoTakeover = regexp.MustCompile(`takeover by (\S+) [\d.]+s after the pause$`)
)

// parseDemo splits the demo's output into the commands it ran (indented
// "$ " lines and the lines under them) and returns also the takeover's new
// leader.
func parseDemo(out string) (cmds []demoCommand, takeover string) {
	leader, token := "", int64(0)
	var cur *demoCommand
	for _, l := range strings.Split(out, "\n") {
		if m := demoLeads.FindStringSubmatch(l); m != nil {
			leader = m[1]
			token, _ = strconv.ParseInt(m[2], 10, 64)
		}
		if m := demoTakeover.FindStringSubmatch(l); m != nil && takeover == "" {
			takeover = m[1]
		}
		switch {
		case strings.HasPrefix(l, "          $ "):
			cmds = append(cmds, demoCommand{command: strings.TrimPrefix(l, "          $ "), leader: leader, token: token})
			cur = &cmds[len(cmds)-1]
		case cur != nil && strings.HasPrefix(l, "          "):
			cur.output = append(cur.output, strings.TrimPrefix(l, "          "))
		case cur != nil && strings.TrimSpace(l) == "":
		default:
			cur = nil
		}
	}
	return cmds, takeover
}

// sameWords compares two command lines or table lines word by word
// (continuation backslashes and column padding aside).
func sameWords(a, b string) bool {
	norm := func(s string) string { return strings.Join(strings.Fields(strings.ReplaceAll(s, "\\\n", " ")), " ") }
	return norm(a) == norm(b)
}

// TestDemoShowsTheLeaseWithKubectlAndThePlugin runs `make demo`'s program
// (test/cmd/demo) as hack/demo.sh does and checks what it shows of
// the Lease: once the first leader is elected and again after the takeover,
// the commands of README.md's demo block (under "Two commands"), run for
// real against the demo's kube-apiserver: plain kubectl with the custom
// columns of "Watching the election" (whose snippet
// TestReadmeWatchingTheElectionSnippetsRunAgainstARealAPIServer runs as
// written) and `kubectl elector status` through kubectl's plugin discovery.
// Their output names the leader the demo's timeline announced just before,
// with its token, and has the README's shape. The README's other claims about
// the demo (takeover, the stale write rejected, `kubectl get lease -o wide`,
// a clean finish) are checked on the same output.
func TestDemoShowsTheLeaseWithKubectlAndThePlugin(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme := readmeDoc(t, root, "README.md")
	var want []readmeCommand
	var watchGet string
	for _, b := range readme.blocks {
		if b.Lang != "console" {
			continue
		}
		for _, c := range framework.ConsoleCommands(b.Code) {
			switch {
			case b.Under("Two commands") && strings.HasPrefix(c.Command, "kubectl "):
				want = append(want, readmeCommand{block: b, ConsoleCommand: c})
			case b.Under("Watching the election") && strings.HasPrefix(c.Command, "kubectl get lease "):
				watchGet = c.Command
			}
		}
	}
	if len(want) != 2 || !strings.HasPrefix(want[0].Command, "kubectl get lease ") || !strings.HasPrefix(want[1].Command, "kubectl elector status ") {
		t.Fatalf("README.md \"Two commands\": want the demo's `kubectl get lease` and `kubectl elector status` commands, found %d: %+v", len(want), want)
	}
	// The demo's custom-columns command is the "Watching the election" one, for the demo's Lease.
	if w := strings.NewReplacer("nightly-run", "demo", "-n team", "-n elector-demo").Replace(watchGet); !sameWords(want[0].Command, w) {
		t.Errorf("README.md line %d: the demo's %q is not the \"Watching the election\" command %q for Lease elector-demo/demo", want[0].line(), want[0].Command, watchGet)
	}

	demo, err := framework.BuildBinary(demoPackage)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, demo)
	cmd.Env = append(os.Environ(), "KUBEBUILDER_ASSETS="+env.cp.AssetsDir, "NO_COLOR=1")
	cmd.Dir = root
	var stdout, stderr framework.SyncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	runErr := cmd.Run()
	out := stdout.String()
	t.Logf("demo ran %.1fs (exit %v); output:\n%s", time.Since(start).Seconds(), runErr, out)
	if runErr != nil {
		t.Fatalf("demo: %v\nstderr:\n%s", runErr, stderr.String())
	}
	if e := stderr.String(); e != "" {
		t.Errorf("demo wrote to stderr: %q", e)
	}

	cmds, takeover := parseDemo(out)
	if len(cmds) != 4 {
		t.Fatalf("the demo ran %d commands, want the README's 2 twice (after the first election and after the takeover): %+v", len(cmds), cmds)
	}
	if takeover == "" {
		t.Fatalf("no \"takeover by POD ... after the pause\" line")
	}
	for i, c := range cmds {
		w := want[i%2]
		where := fmt.Sprintf("demo command %d %q (README.md line %d)", i+1, c.command, w.line())
		if !sameWords(c.command, w.Command) {
			t.Errorf("%s: the README shows %q", where, w.Command)
			continue
		}
		if c.leader == "" {
			t.Errorf("%s: ran before the timeline announced a leader", where)
			continue
		}
		if i >= 2 && c.leader != takeover {
			t.Errorf("%s: after the takeover by %s, the timeline's last leader is %s", where, takeover, c.leader)
		}
		if len(c.output) < 2 || len(w.Output) < 2 || !sameWords(c.output[0], w.Output[0]) {
			t.Errorf("%s: output %q, want the README's header %q and a row", where, c.output, w.Output)
			continue
		}
		row := strings.Fields(c.output[1])
		tok := strconv.FormatInt(c.token, 10)
		switch i % 2 {
		case 0: // NAME HOLDER TOKEN RENEWED
			if len(row) != 4 || row[0] != "demo" || row[1] != c.leader || row[2] != tok {
				t.Errorf("%s: row %q, want demo %s %s RENEWED", where, c.output[1], c.leader, tok)
			} else if _, err := time.Parse(time.RFC3339Nano, row[3]); err != nil {
				t.Errorf("%s: RENEWED %q: %v", where, row[3], err)
			}
		case 1: // LEASE HOLDER TOKEN RENEWED DURATION EXPIRES IN, then the Events
			st, err := parseStatus(strings.Join(c.output, "\n"))
			if err != nil || st.lease != "demo" || st.holder != c.leader || st.token != c.token || st.duration != "4s" || st.expiresIn == "expired" {
				t.Errorf("%s: %v, row %+v; want demo %s %d, DURATION 4s, not expired", where, err, st, c.leader, c.token)
			}
			if len(c.output) < 4 || len(w.Output) < 4 || c.output[2] != w.Output[2] || !sameWords(c.output[3], w.Output[3]) {
				t.Errorf("%s: output %q, want an Events section shaped as %q", where, c.output, w.Output)
				continue
			}
			became := fmt.Sprintf("%s became leader with fencing token %d", c.leader, c.token)
			found := false
			for _, l := range c.output[4:] {
				if f := strings.Fields(l); len(f) > 5 && f[3] == "LeaderElection" && f[4] == c.leader && strings.Join(f[5:], " ") == became {
					found = true
				}
			}
			if !found {
				t.Errorf("%s: no Event line %q in %q", where, became, c.output)
			}
		}
	}
	if cmds[2].token <= cmds[0].token {
		t.Errorf("token after the takeover %d, want more than the first leader's %d", cmds[2].token, cmds[0].token)
	}

	// The README's other claims about the demo, on the same run.
	for _, claim := range []*regexp.Regexp{
		regexp.MustCompile(`SIGSTOP pod-\w`),
		regexp.MustCompile(`✗ write with token \d+ REJECTED by the store: stale, it already accepted token \d+ \(the late write from before the pause\)`),
		regexp.MustCompile(`SIGKILL pod-\w`),
		regexp.MustCompile(`▶ kubectl get lease -n elector-demo -o wide\n\s+NAME\s+HOLDER\s+AGE\n\s+demo\s+pod-\w\s+\S+\n`),
		regexp.MustCompile(`demo finished; everything is cleaned up\n$`),
	} {
		if !claim.MatchString(out) {
			t.Errorf("the demo's output has no match for %s", claim)
		}
	}
}
