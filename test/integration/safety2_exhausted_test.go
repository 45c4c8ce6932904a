package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// Issue 23, N5: one write of leaseTransitions = 2147483647 (the largest
// count a Lease holds) leaves no token to issue. The sidecars say so
// instead of wedging silently: /leader cannotLead names the count on every
// candidate, elector_cannot_lead is 1, and a Warning Event is recorded on
// the Lease; nobody serves a token (in particular not the edited count).
// The recovery the README documents, one patch that lowers the count and
// sets a new elector-sidecar.io/transitions-reset value (the README's
// command, run as written there but for the Lease's name), brings a leader
// back with the next token (42 after 41) without restarting any process.
func TestExhaustedLeaseTransitionsAreReportedAndAResetPatchRecovers(t *testing.T) {
	g := newGroup(t, testTimings)
	t.Cleanup(func() { g.checkClaims(nil) })
	procs := g.start("pod-a", "pod-b", "pod-c")
	leader, tok := g.waitLeader(startupTimeout)
	g.waitAllSee(leader, tok.Token)

	g.updateLeaseSpec(func(l *coordinationv1.Lease) {
		top := int32(math.MaxInt32)
		l.Spec.LeaseTransitions = &top
	})
	edited := time.Now()
	reasons := map[string]string{}
	g.waitFor(2*testTimings.LeaseDuration+failoverSlack, "every candidate's /leader to say it cannot lead, and no token served", func(ctx context.Context) error {
		for _, c := range procs {
			if r := c.Token(ctx); r.Valid() {
				return fmt.Errorf("%s serves %s", c.Instance, r)
			}
			d, err := diagnostics(ctx, c)
			if err != nil {
				return err
			}
			if !strings.Contains(d.CannotLead, "2147483647") {
				return fmt.Errorf("%s: /leader cannotLead %q, want the reason naming leaseTransitions 2147483647", c.Instance, d.CannotLead)
			}
			reasons[c.Instance] = d.CannotLead
		}
		return nil
	})
	t.Logf("leaseTransitions set to 2147483647 by hand; %v later every candidate says it cannot lead, e.g. %s: %q",
		time.Since(edited).Round(time.Millisecond), procs[0].Instance, reasons[procs[0].Instance])
	event := g.waitWarning(10*time.Second, "2147483647")
	g.waitMetric("elector_cannot_lead", 1)
	t.Logf("Warning Event: %s", event)
	for _, s := range g.Sampler.Samples() {
		if s.Valid() && s.Token >= math.MaxInt32 {
			t.Fatalf("%s served token %d, a count nobody acquired", s.Target, s.Token)
		}
	}

	// The README's recovery: one patch lowers the count and declares it.
	patch, count := readmeResetPatch(t)
	if out, err := env.cp.Kubectl(g.ctx, "-n", g.namespace, "patch", "lease", g.lease, "--type=merge", "-p", patch); err != nil {
		t.Fatalf("kubectl patch lease (README.md, %q): %v\n%s", readmeResetSection, err, out)
	}
	patched := time.Now()
	next, ntok := g.waitLeader(2*testTimings.LeaseDuration + failoverSlack)
	if ntok.Token != count+1 {
		t.Fatalf("%s leads with token %d after the count was reset to %d, want %d", next.Instance, ntok.Token, count, count+1)
	}
	g.waitAllSee(next, count+1)
	g.waitFor(10*time.Second, "no candidate saying it cannot lead", func(ctx context.Context) error {
		for _, c := range procs {
			d, err := diagnostics(ctx, c)
			if err != nil {
				return err
			}
			if d.CannotLead != "" {
				return fmt.Errorf("%s: /leader cannotLead %q", c.Instance, d.CannotLead)
			}
		}
		return nil
	})
	g.waitMetric("elector_cannot_lead", 0)
	if all := g.All(); len(all) != len(procs) {
		t.Fatalf("%d processes started, want the %d first ones only", len(all), len(procs))
	}
	for _, c := range procs {
		if c.Exited() {
			t.Fatalf("%s exited", c.Instance)
		}
	}
	t.Logf("the README's reset patch %s: %s leads with token %d %v later, no process restarted", patch, next.Instance, ntok.Token, time.Since(patched).Round(time.Millisecond))
}

// waitMetric waits until name reads want on every running candidate.
func (g *electionGroup) waitMetric(name string, want float64) {
	g.t.Helper()
	g.waitFor(10*time.Second, fmt.Sprintf("%s %v on every candidate", name, want), func(ctx context.Context) error {
		for _, c := range g.Running() {
			v, err := metricValue(ctx, c, name)
			if err != nil {
				return err
			}
			if v != want {
				return fmt.Errorf("%s: %s %v", c.Instance, name, v)
			}
		}
		return nil
	})
}

// readmeResetSection is the README section with the recovery command.
const readmeResetSection = "Recovering an exhausted token"

// readmeResetPatch returns the merge patch of the README's `kubectl patch
// lease` under readmeResetSection and the count it sets; it fails the test
// if the README has none, or the patch does not set both the count and the
// reset annotation.
func readmeResetPatch(t *testing.T) (string, int64) {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	quoted := regexp.MustCompile(`-p '([^']+)'`)
	for _, b := range framework.MarkdownCodeBlocks(string(md)) {
		if b.Lang != "console" || !b.Under(readmeResetSection) {
			continue
		}
		for _, c := range framework.ConsoleCommands(b.Code) {
			m := quoted.FindStringSubmatch(c.Command)
			if !strings.HasPrefix(c.Command, "kubectl patch lease") || m == nil {
				continue
			}
			var p struct {
				Metadata struct {
					Annotations map[string]string `json:"annotations"`
				} `json:"metadata"`
				Spec struct {
					LeaseTransitions *int64 `json:"leaseTransitions"`
				} `json:"spec"`
			}
			if err := json.Unmarshal([]byte(m[1]), &p); err != nil || p.Spec.LeaseTransitions == nil || p.Metadata.Annotations[election.TransitionsResetAnnotation] == "" {
				t.Fatalf("README.md %s: the patch %s does not set spec.leaseTransitions and a %s value (%v)", b.Where(), m[1], election.TransitionsResetAnnotation, err)
			}
			return m[1], *p.Spec.LeaseTransitions
		}
	}
	t.Fatalf("README.md: no `$ kubectl patch lease NAME --type=merge -p '...'` in a console block under %q", readmeResetSection)
	return "", 0
}
