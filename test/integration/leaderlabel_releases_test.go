package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// releaseGroup is one "release" of the two-releases test: its own Lease and
// pods (instance label) in a namespace it shares with another release.
func releaseGroup(t *testing.T, ns, instance string) *electionGroup {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	g := &electionGroup{
		Group: framework.NewGroup(framework.CandidateSpec{
			Kind: framework.KindSidecar, Binary: env.sidecarBin, LeaseName: instance, Namespace: ns,
			Kubeconfig: env.cp.Kubeconfig, Timings: testTimings, LogDir: filepath.Join(env.logDir, t.Name(), instance),
			// One label key for both releases (the worst case): the selector keeps them apart.
			ExtraArgs: []string{"--leader-label=" + leaderLabelKey, "--leader-label-selector=app.kubernetes.io/instance=" + instance},
		}),
		t: t, ctx: ctx, namespace: ns, lease: instance,
	}
	t.Cleanup(func() {
		g.Sampler.Stop()
		if err := g.Sampler.Check(); err != nil {
			t.Errorf("release %s: sampled /token of %d processes: %v", instance, len(g.All()), err)
		}
		g.StopAll(3 * time.Second)
		if t.Failed() {
			t.Logf("release %s: process logs (last lines):\n%s", instance, g.Logs(60))
		}
	})
	for _, name := range []string{instance + "-0", instance + "-1"} {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app.kubernetes.io/instance": instance}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}}},
		}
		if _, err := env.cp.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return g
}

// labeledByRelease returns the pods of ns that carry the leader label, by
// instance label, sorted.
func labeledByRelease(ctx context.Context, ns string) (map[string][]string, error) {
	pods, err := env.cp.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: leaderLabelKey + "=true"})
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, p := range pods.Items {
		i := p.Labels["app.kubernetes.io/instance"]
		out[i] = append(out[i], p.Name)
		slices.Sort(out[i])
	}
	return out, nil
}

// crossRelease returns an error if a sidecar of one release removed the
// label from a pod of another (its log names each former leader's pod it
// stripped).
func crossRelease(groups map[string]*electionGroup) error {
	for r, g := range groups {
		for _, c := range g.All() {
			for _, line := range strings.Split(c.Logs(), "\n") {
				_, pod, ok := strings.Cut(line, "formerLeader=")
				if ok && !strings.HasPrefix(pod, r+"-") {
					return fmt.Errorf("a sidecar of release %s stripped the label from %s: %s", r, pod, line)
				}
			}
		}
	}
	return nil
}

// TestTwoReleasesInOneNamespaceDoNotStripEachOthersLeaderLabel: two
// elections (two Leases, two sets of Pod objects) in one namespace with one
// label key, each sidecar with --leader-label-selector of its release (as
// the chart sets it): through several resyncs (where a leader lists the
// labelled pods again and strips every other one it selects) and a handoff
// in one release, no sidecar strips the other release's label, each
// release's labelled pods stay its own (at most one), and each release's
// leader pod is labelled.
func TestTwoReleasesInOneNamespaceDoNotStripEachOthersLeaderLabel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns, err := env.cp.CreateNamespace(ctx, "it")
	if err != nil {
		t.Fatal(err)
	}
	groups := map[string]*electionGroup{"billing": releaseGroup(t, ns, "billing"), "orders": releaseGroup(t, ns, "orders")}
	for r, g := range groups {
		g.start(r+"-0", r+"-1")
	}
	// Each release's leader (as it is now: a loaded machine may move it) labelled, and only it.
	leadersLabelled := func(ctx context.Context) error {
		got, err := labeledByRelease(ctx, ns)
		if err != nil {
			return err
		}
		for r, g := range groups {
			leaders := g.Leaders(ctx)
			if len(leaders) != 1 || !slices.Equal(got[r], []string{leaders[0].Identity()}) {
				return fmt.Errorf("release %s: leaders %v, labelled pods %v", r, leaders, got)
			}
		}
		return nil
	}
	// At any moment: each release's labelled pods are its own, at most one,
	// and nobody stripped another release's pod.
	apart := func(ctx context.Context) error {
		got, err := labeledByRelease(ctx, ns)
		if err != nil {
			return err
		}
		for r, pods := range got {
			if _, ok := groups[r]; !ok || len(pods) > 1 {
				return fmt.Errorf("labelled pods %v", got)
			}
		}
		return crossRelease(groups)
	}
	groups["billing"].waitFor(30*time.Second, "each release's leader labelled", leadersLabelled)
	// Resyncs come every lease duration: several of them.
	if err := framework.Consistently(ctx, 300*time.Millisecond, 4*testTimings.LeaseDuration, "the releases kept apart", apart); err != nil {
		t.Fatal(err)
	}
	// A handoff in billing.
	billing := groups["billing"]
	old, _ := billing.waitLeader(startupTimeout)
	if err := old.Terminate(); err != nil {
		t.Fatal(err)
	}
	billing.waitFor(30*time.Second, "billing's new leader labelled, orders' kept", func(ctx context.Context) error {
		if !old.Exited() {
			return fmt.Errorf("%s still running", old.Identity())
		}
		return leadersLabelled(ctx)
	})
	if err := framework.Consistently(ctx, 300*time.Millisecond, 2*testTimings.LeaseDuration, "the releases kept apart after the handoff", apart); err != nil {
		t.Fatal(err)
	}
}
