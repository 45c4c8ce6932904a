package integration

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

const leaderLabelKey = "elector-sidecar.io/leader"

// createPods creates Pod objects (no kubelet runs them: they stay Pending)
// named after the candidates; those in labeled carry the leader label.
func (g *electionGroup) createPods(names []string, labeled ...string) {
	g.t.Helper()
	for _, name := range names {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: g.namespace, Labels: map[string]string{"app": "billing"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}}},
		}
		if slices.Contains(labeled, name) {
			p.Labels[leaderLabelKey] = "true"
		}
		if _, err := env.cp.Client.CoreV1().Pods(g.namespace).Create(g.ctx, p, metav1.CreateOptions{}); err != nil {
			g.t.Fatal(err)
		}
	}
}

// labeledPods returns the pods that carry the leader label, sorted.
func (g *electionGroup) labeledPods(ctx context.Context) ([]string, error) {
	pods, err := env.cp.Client.CoreV1().Pods(g.namespace).List(ctx, metav1.ListOptions{LabelSelector: leaderLabelKey + "=true"})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, p := range pods.Items {
		if p.Labels["app"] != "billing" {
			return nil, fmt.Errorf("pod %s lost its other labels: %v", p.Name, p.Labels)
		}
		names = append(names, p.Name)
	}
	slices.Sort(names)
	return names, nil
}

func (g *electionGroup) waitLabeled(timeout time.Duration, want ...string) {
	g.t.Helper()
	g.waitFor(timeout, fmt.Sprintf("the leader label on exactly %v", want), func(ctx context.Context) error {
		got, err := g.labeledPods(ctx)
		if err != nil {
			return err
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("labeled: %v", got)
		}
		return nil
	})
}

// startLabeled starts a sidecar with --leader-label; its identity is its pod's name.
func (g *electionGroup) startLabeled(identity string) *framework.Candidate {
	g.t.Helper()
	spec := g.Template
	spec.Identity = identity
	spec.ExtraArgs = append(spec.ExtraArgs, "--leader-label="+leaderLabelKey)
	c, err := g.StartSpec(g.ctx, spec)
	if err != nil {
		g.t.Fatal(err)
	}
	return c
}

// rv is a resourceVersion as a number: on one etcd, the revision of the write.
func rv(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", s, err)
	}
	return n
}

// firstWrite replays the events of w (started at an earlier resourceVersion)
// until match accepts one, and returns its resourceVersion.
func firstWrite(t *testing.T, w watch.Interface, what string, match func(runtime any) bool) int64 {
	t.Helper()
	defer w.Stop()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch ended before %s", what)
			}
			if ev.Type != watch.Modified && ev.Type != watch.Added {
				continue
			}
			if match(ev.Object) {
				return rv(t, ev.Object.(metav1.Object).GetResourceVersion())
			}
		case <-timeout:
			t.Fatalf("no %s in the watch", what)
		}
	}
}

// TestLeaderLabelFollowsTheLeader: real sidecars with --leader-label, each
// named after a Pod object: the leader's pod carries the label and only it
// (a stale label on another pod is removed by the new leader, a stale label
// on a starting sidecar's own pod by that sidecar); on a SIGTERM handoff the
// old leader's label is removed before its Lease release is written (by
// etcd revision), and the new leader's pod gets it; a SIGSTOPped leader's
// label is removed by the leader that takes over.
func TestLeaderLabelFollowsTheLeader(t *testing.T) {
	g := newGroup(t, testTimings)
	ctx, pods := g.ctx, env.cp.Client.CoreV1().Pods(g.namespace)
	g.createPods([]string{"pod-a", "pod-b", "pod-c"}, "pod-b") // pod-b: a former leader's label
	a := g.startLabeled("pod-a")
	if l, _ := g.waitLeader(startupTimeout); l != a {
		t.Fatalf("leader %s, want pod-a", l)
	}
	g.waitLabeled(10*time.Second, "pod-a")

	// A starting sidecar whose pod carries a stale label removes it.
	if _, err := pods.Patch(ctx, "pod-c", types.MergePatchType, []byte(`{"metadata":{"labels":{"`+leaderLabelKey+`":"true"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	g.startLabeled("pod-c")
	g.waitLabeled(10*time.Second, "pod-a")
	b := g.startLabeled("pod-b")
	g.waitAllSee(a, g.maxToken())

	// SIGTERM handoff: the label leaves pod-a before the release write.
	podList, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := env.cp.GetLease(ctx, g.namespace, g.lease)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if code := a.Stop(5 * time.Second); code != 0 {
		t.Fatalf("pod-a exited %d after SIGTERM", code)
	}
	next, _ := g.waitLeader(failoverSlack, a)
	g.waitLabeled(10*time.Second, next.Identity())
	t.Logf("SIGTERM of pod-a -> the label on %s only: %v", next.Identity(), time.Since(start).Round(time.Millisecond))

	pw, err := pods.Watch(ctx, metav1.ListOptions{ResourceVersion: podList.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	removed := firstWrite(t, pw, "removal of pod-a's label", func(o any) bool {
		p := o.(*corev1.Pod)
		return p.Name == "pod-a" && p.Labels[leaderLabelKey] == ""
	})
	lw, err := env.cp.Client.CoordinationV1().Leases(g.namespace).Watch(ctx, metav1.ListOptions{ResourceVersion: lease.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	// The step-down: a release, or a direct handoff to another pod.
	released := firstWrite(t, lw, "pod-a's step-down (release or handoff) of the Lease", func(o any) bool {
		return steppedDown(o.(*coordinationv1.Lease))
	})
	if removed >= released {
		t.Fatalf("pod-a's label removed at resourceVersion %d, after its step-down of the Lease at %d", removed, released)
	}
	t.Logf("pod-a's label removed at resourceVersion %d, its Lease handed over or released at %d", removed, released)

	// SIGSTOP of the leader: the leader that takes over removes its label.
	frozen := next
	other := b
	if frozen == b {
		other = g.Get("pod-c")
	}
	if err := frozen.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = frozen.Resume() })
	start = time.Now()
	if l, _ := g.waitLeader(testTimings.LeaseDuration+failoverSlack, frozen); l != other {
		t.Fatalf("leader %s after freezing %s, want %s", l, frozen, other)
	}
	g.waitLabeled(10*time.Second, other.Identity())
	t.Logf("SIGSTOP of %s -> the label on %s only: %v", frozen.Identity(), other.Identity(), time.Since(start).Round(time.Millisecond))
	if err := frozen.Resume(); err != nil {
		t.Fatal(err)
	}
	g.waitFor(10*time.Second, frozen.Identity()+" follows "+other.Identity(), func(ctx context.Context) error {
		s, err := frozen.Leader(ctx)
		if err != nil {
			return err
		}
		if s.IsLeader || s.Holder != other.Identity() {
			return fmt.Errorf("/leader %+v", s)
		}
		return nil
	})
	g.waitLabeled(10*time.Second, other.Identity())
}
