package leaderlabel

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
	"github.com/elector-sidecar/elector-sidecar/pkg/kubeclient/clientset"
)

// These run the labeler beside a real election.Elector on a fake clientset
// and a fake clock, wired as the sidecar wires them.

const leaseName = "billing"

func freeLease() *coordinationv1.Lease {
	now := metav1.NewMicroTime(t0)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: leaseName, Namespace: ns, UID: "uid-1", ResourceVersion: "5"},
		Spec:       coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](3), RenewTime: &now, AcquireTime: &now, LeaseTransitions: ptr.To[int32](1)},
	}
}

func pod(name string, labeled bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "billing"}}}
	if labeled {
		p.Labels[key] = Value
	}
	return p
}

// orderLog records, in order, the label patches and the Lease's release write.
type orderLog struct {
	mu    sync.Mutex
	lines []string
}

func (o *orderLog) add(s string) {
	o.mu.Lock()
	o.lines = append(o.lines, s)
	o.mu.Unlock()
}

func (o *orderLog) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return strings.Join(o.lines, ", ")
}

type wired struct {
	el     *election.Elector
	client *fake.Clientset
	clock  *testingclock.FakeClock
	order  *orderLog
	stop   func()
}

// runWired runs pod-a's elector and labeler; pod-b carries a stale label
// (a frozen former leader).
func runWired(t *testing.T) *wired {
	t.Helper()
	client := fake.NewClientset(freeLease(), pod("pod-a", false), pod("pod-b", true))
	order := &orderLog{}
	client.PrependReactor("patch", "pods", func(act k8stesting.Action) (bool, runtime.Object, error) {
		p := act.(k8stesting.PatchAction)
		op := "add"
		if strings.Contains(string(p.GetPatch()), "null") {
			op = "remove"
		}
		order.add(op + " label " + p.GetName())
		return false, nil, nil
	})
	client.PrependReactor("update", "leases", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if l := act.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease); ptr.Deref(l.Spec.HolderIdentity, "") == "" {
			order.add("release write")
		}
		return false, nil, nil
	})
	clk := testingclock.NewFakeClock(t0)
	l, err := New(Config{Client: clientset.Wrap(client), Namespace: ns, PodName: "pod-a", Key: key, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	el, err := election.New(election.Config{
		Client: clientset.Wrap(client), Namespace: ns, Name: leaseName, Identity: "pod-a",
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond, ClockSkewMargin: 200 * time.Millisecond,
		Clock: clk, Logger: quiet(), BeforeRelease: l.BeforeRelease,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	labelCtx, stopLabels := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = el.Run(ctx) }()
	go func() { defer wg.Done(); l.Run(labelCtx, el) }()
	w := &wired{el: el, client: client, clock: clk, order: order}
	var once sync.Once
	w.stop = func() { once.Do(func() { cancel(); stopLabels(); wg.Wait() }) }
	t.Cleanup(w.stop)
	return w
}

func (w *wired) labeled(t *testing.T, name string) bool {
	t.Helper()
	p, err := w.client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Labels[key] == Value
}

func (w *wired) leads(t *testing.T) {
	t.Helper()
	eventually(t, "pod-a leads, labeled, and pod-b unlabeled", func() bool {
		if !w.el.Status().IsLeader {
			// A free Lease found at start is taken once it expires on
			// the elector's clock.
			w.clock.Step(50 * time.Millisecond)
			return false
		}
		return w.labeled(t, "pod-a") && !w.labeled(t, "pod-b")
	})
	if got := w.order.String(); got != "remove label pod-b, add label pod-a" {
		t.Fatalf("order on taking the lead: %s", got)
	}
}

func TestLabelIsRemovedBeforeTheReleaseWrite(t *testing.T) {
	w := runWired(t)
	w.leads(t)
	if err := w.el.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := w.order.String(); got != "remove label pod-b, add label pod-a, remove label pod-a, release write" {
		t.Fatalf("order: %s", got)
	}
	if w.labeled(t, "pod-a") {
		t.Fatal("pod-a still labeled after the release")
	}
}

func TestLabelIsRemovedBeforeTheReleaseWriteOnShutdown(t *testing.T) {
	w := runWired(t)
	w.leads(t)
	w.stop()
	if got := w.order.String(); got != "remove label pod-b, add label pod-a, remove label pod-a, release write" {
		t.Fatalf("order: %s", got)
	}
}

func TestLabelIsRemovedWhenTheTokenRunsOut(t *testing.T) {
	w := runWired(t)
	w.leads(t)
	// The API server stops taking the renewals: the token runs out on the
	// elector's clock, with no Lease event; Changed reports it.
	prependReactor(&w.client.Fake, "update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("cut off")
	})
	s := w.el.Status()
	w.clock.Step(s.ExpiresIn)
	eventually(t, "pod-a unlabeled", func() bool { return !w.labeled(t, "pod-a") })
	if w.el.Status().IsLeader {
		t.Fatal("label removed while the token is valid")
	}
	if got := w.order.String(); got != "remove label pod-b, add label pod-a, remove label pod-a" {
		t.Fatalf("order: %s", got)
	}
}
