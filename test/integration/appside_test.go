package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/elector-sidecar/elector-sidecar/pkg/client"
	"github.com/elector-sidecar/elector-sidecar/pkg/localapi"
)

// The app's side on real processes (issue 29): the leader Service's
// endpoints, and an app following the election with client.Watch.

// serviceEndpoints returns the pods the Service selects, sorted: what the
// endpoints controller would publish (envtest runs no controller manager,
// so the test applies the Service's selector itself).
func (g *electionGroup) serviceEndpoints(ctx context.Context, svc string) ([]string, error) {
	s, err := env.cp.Client.CoreV1().Services(g.namespace).Get(ctx, svc, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	pods, err := env.cp.Client.CoreV1().Pods(g.namespace).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(s.Spec.Selector).String()})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, p := range pods.Items {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	return names, nil
}

func (g *electionGroup) waitEndpoints(timeout time.Duration, svc string, want ...string) {
	g.t.Helper()
	g.waitFor(timeout, fmt.Sprintf("the Service %s selecting exactly %v", svc, want), func(ctx context.Context) error {
		got, err := g.serviceEndpoints(ctx, svc)
		if err != nil {
			return err
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("selects %v", got)
		}
		return nil
	})
}

// denyLabelOn installs a ValidatingAdmissionPolicy that refuses any write
// leaving the leader label on pod in g's namespace (the sidecar's patch
// fails with 422/403, as under a misconfigured policy or RBAC), and waits
// until it is in force. It returns a func that removes it.
func (g *electionGroup) denyLabelOn(pod string) func() {
	g.t.Helper()
	adm := env.cp.Client.AdmissionregistrationV1()
	name := "deny-leader-label-" + g.namespace
	fail := admissionv1.Deny
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptrTo(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Update},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
				},
			}}},
			Validations: []admissionv1.Validation{{
				Expression: fmt.Sprintf(`object.metadata.name != %q || !has(object.metadata.labels) || !(%q in object.metadata.labels)`, pod, leaderLabelKey),
				Message:    "test: the leader label is refused on " + pod,
			}},
		},
	}
	if _, err := adm.ValidatingAdmissionPolicies().Create(g.ctx, policy, metav1.CreateOptions{}); err != nil {
		g.t.Fatal(err)
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionv1.ValidationAction{fail},
			MatchResources: &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": g.namespace},
			}},
		},
	}
	if _, err := adm.ValidatingAdmissionPolicyBindings().Create(g.ctx, binding, metav1.CreateOptions{}); err != nil {
		g.t.Fatal(err)
	}
	remove := func() {
		_ = adm.ValidatingAdmissionPolicyBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = adm.ValidatingAdmissionPolicies().Delete(context.Background(), name, metav1.DeleteOptions{})
	}
	g.t.Cleanup(remove)
	patch := []byte(`{"metadata":{"labels":{"` + leaderLabelKey + `":"true"}}}`)
	g.waitFor(30*time.Second, "the policy refusing the label on "+pod, func(ctx context.Context) error {
		_, err := env.cp.Client.CoreV1().Pods(g.namespace).Patch(ctx, pod, types.MergePatchType, patch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
			return nil
		}
		return fmt.Errorf("a dry-run label patch: %v", err)
	})
	return remove
}

// TestLeaderServiceFollowsLeadershipThroughAFailedPatchAndAHandRemoval:
// real sidecars with --leader-label and a leader Service selecting the
// label. The leader's first patch fails (an admission policy refuses it):
// once the policy goes, the Service gets the leader (the labeller re-reads
// the pod after a failed patch and retries). `kubectl label pod ... KEY-`
// on the leader: the label is back within the resync (the lease duration).
// A hand-added label on a follower goes at the leader's resync. On a
// handoff the Service follows to the new leader.
func TestLeaderServiceFollowsLeadershipThroughAFailedPatchAndAHandRemoval(t *testing.T) {
	g := newGroup(t, testTimings)
	ctx, pods := g.ctx, env.cp.Client.CoreV1().Pods(g.namespace)
	g.createPods([]string{"pod-a", "pod-b"})
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "billing-leader", Namespace: g.namespace},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "billing", leaderLabelKey: "true"},
			Ports:    []corev1.ServicePort{{Port: 80}},
		},
	}
	if _, err := env.cp.Client.CoreV1().Services(g.namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	allow := g.denyLabelOn("pod-a")
	a := g.startLabeled("pod-a")
	if l, _ := g.waitLeader(startupTimeout); l != a {
		t.Fatalf("leader %s, want pod-a", l)
	}
	g.waitEndpoints(5*time.Second, "billing-leader") // refused: no endpoint yet
	allow()
	g.waitEndpoints(20*time.Second, "billing-leader", "pod-a")

	// kubectl label pod pod-a KEY-
	start := time.Now()
	if _, err := pods.Patch(ctx, "pod-a", types.MergePatchType, []byte(`{"metadata":{"labels":{"`+leaderLabelKey+`":null}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	g.waitEndpoints(testTimings.LeaseDuration+failoverSlack, "billing-leader", "pod-a")
	t.Logf("hand removal of the leader's label -> back: %v", time.Since(start).Round(time.Millisecond))

	// kubectl label pod pod-b KEY=true (pod-b does not lead).
	b := g.startLabeled("pod-b")
	g.waitAllSee(a, g.maxToken())
	if _, err := pods.Patch(ctx, "pod-b", types.MergePatchType, []byte(`{"metadata":{"labels":{"`+leaderLabelKey+`":"true"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	g.waitEndpoints(testTimings.LeaseDuration+failoverSlack, "billing-leader", "pod-a")

	// A handoff: the Service follows.
	if code := a.Stop(5 * time.Second); code != 0 {
		t.Fatalf("pod-a exited %d after SIGTERM", code)
	}
	if l, _ := g.waitLeader(failoverSlack, a); l != b {
		t.Fatalf("leader %s after pod-a stopped, want pod-b", l)
	}
	g.waitEndpoints(10*time.Second, "billing-leader", "pod-b")
}

// appBelief is one state an app's Watch callback got, and when.
type appBelief struct {
	at time.Time
	localapi.LeaderResponse
}

// TestAppUsingWatchNeverBelievesItLeadsPastTheSidecarsLastWord: an app
// follows a real sidecar with client.Watch; the sidecar leads, then is
// SIGSTOPped (it hangs: its stream stays open and silent). The app's
// callback gets the unknown state once the last isLeader:true's expiresInMs
// has run out, counted from when the app read it (with a slack for a loaded
// machine's scheduling), and the sidecar's state again after SIGCONT.
func TestAppUsingWatchNeverBelievesItLeadsPastTheSidecarsLastWord(t *testing.T) {
	g := newGroup(t, testTimings)
	a := g.start("pod-a")[0]
	if l, _ := g.waitLeader(startupTimeout); l != a {
		t.Fatalf("leader %s, want pod-a", l)
	}
	c, err := client.New(a.URL)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		beliefs []appBelief
	)
	got := func() []appBelief {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(beliefs)
	}
	wctx, stop := context.WithCancel(g.ctx)
	done := make(chan error, 1)
	go func() {
		done <- c.Watch(wctx, func(s localapi.LeaderResponse) {
			mu.Lock()
			beliefs = append(beliefs, appBelief{time.Now(), s})
			mu.Unlock()
		})
	}()
	defer func() {
		stop()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Watch returned %v, want context.Canceled", err)
		}
	}()
	// A few renewals reach the app.
	g.waitFor(10*time.Second, "the app sees three renewals", func(context.Context) error {
		n := 0
		for _, b := range got() {
			if b.IsLeader {
				n++
			}
		}
		if n < 3 {
			return fmt.Errorf("%d isLeader:true states so far", n)
		}
		return nil
	})
	if err := a.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Resume() })
	paused := time.Now()
	var unknown appBelief
	g.waitFor(testTimings.LeaseDuration+failoverSlack, "the app told it does not know", func(context.Context) error {
		for _, b := range got() {
			if b.at.After(paused) && client.IsUnknown(b.LeaderResponse) {
				unknown = b
				return nil
			}
		}
		return fmt.Errorf("states since the pause: %d", len(got()))
	})
	// The last isLeader:true before the unknown state: the app believed it
	// led from then until the unknown state, and no longer than its
	// expiresInMs (plus scheduling slack).
	const slack = time.Second
	var last appBelief
	for _, b := range got() {
		if b.at.After(unknown.at) {
			break
		}
		if b.IsLeader {
			last = b
		}
	}
	vouched := time.Duration(last.ExpiresInMs) * time.Millisecond
	if held := unknown.at.Sub(last.at); held > vouched+slack {
		t.Errorf("the app believed it led for %v after its last isLeader:true, which vouched for %v", held, vouched)
	}
	t.Logf("SIGSTOP -> the app's unknown state: %v (its last isLeader:true vouched for %v, held %v)",
		unknown.at.Sub(paused).Round(time.Millisecond), vouched, unknown.at.Sub(last.at).Round(time.Millisecond))
	if err := a.Resume(); err != nil {
		t.Fatal(err)
	}
	g.waitFor(20*time.Second, "the app follows the sidecar again", func(context.Context) error {
		bs := got()
		if l := bs[len(bs)-1]; l.Ready && !client.IsUnknown(l.LeaderResponse) {
			return nil
		}
		return fmt.Errorf("last state %+v", bs[len(bs)-1])
	})
}
