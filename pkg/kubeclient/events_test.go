package kubeclient_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/elector-sidecar/elector-sidecar/internal/testsupport"
	"github.com/elector-sidecar/elector-sidecar/pkg/kubeclient"
)

var (
	source = corev1.EventSource{Component: "elector-sidecar", Host: "pod-a"}
	lease  = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "billing", Namespace: "ns", UID: "uid-1", ResourceVersion: "42"}}
	t0     = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// events waits until the fake holds n Events in ns and returns them.
func events(t *testing.T, cs *fake.Clientset, n int) []corev1.Event {
	t.Helper()
	var items []corev1.Event
	err := testsupport.Eventually(context.Background(), 5*time.Millisecond, 10*time.Second, fmt.Sprintf("%d events", n), func(ctx context.Context) error {
		l, err := cs.CoreV1().Events("ns").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		items = l.Items
		if len(items) != n {
			return fmt.Errorf("%d events", len(items))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return items
}

func TestRecorderWritesTheEventClientGosRecorderWrites(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	ours := fake.NewClientset()
	r := kubeclient.NewRecorder(ours.CoreV1().Events("ns"), source, quiet(), clk)
	defer r.Shutdown()
	r.Eventf(lease, corev1.EventTypeNormal, "LeaderElection", "%s became leader with fencing token %d", "pod-a", 7)
	got := events(t, ours, 1)[0]

	// client-go's broadcaster and recorder, as the sidecar used them.
	theirs := fake.NewClientset()
	b := record.NewBroadcaster()
	defer b.Shutdown()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: theirs.CoreV1().Events("ns")})
	b.NewRecorder(scheme.Scheme, source).Eventf(lease, corev1.EventTypeNormal, "LeaderElection", "%s became leader with fencing token %d", "pod-a", 7)
	want := events(t, theirs, 1)[0]

	if !strings.HasPrefix(got.Name, "billing.") || got.Name != fmt.Sprintf("billing.%x", t0.UnixNano()) {
		t.Errorf("name %q, want billing.<unix nanoseconds in hex> (client-go's %q)", got.Name, want.Name)
	}
	if !got.FirstTimestamp.Time.Equal(t0) || !got.LastTimestamp.Time.Equal(t0) {
		t.Errorf("timestamps %v, %v; want the clock's %v", got.FirstTimestamp, got.LastTimestamp, t0)
	}
	// Everything but the name and the times is client-go's (the fake
	// stamps managedFields with its own time).
	for _, e := range []*corev1.Event{&got, &want} {
		e.Name, e.FirstTimestamp, e.LastTimestamp, e.ManagedFields = "", metav1.Time{}, metav1.Time{}, nil
	}
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("event\n got %+v\nwant %+v (client-go's)", got, want)
	}
	if got.InvolvedObject.Kind != "Lease" || got.InvolvedObject.APIVersion != "coordination.k8s.io/v1" || got.InvolvedObject.UID != "uid-1" ||
		got.ReportingController != "elector-sidecar" || got.ReportingInstance != "pod-a" || got.Count != 1 {
		t.Errorf("event %+v", got)
	}
}

func TestRecorderRetriesWhileTheAPIServerIsUnreachableButNotARejection(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	cs := fake.NewClientset()
	var creates atomic.Int32
	cs.PrependReactor("create", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ev := a.(k8stesting.CreateAction).GetObject().(*corev1.Event)
		switch n := creates.Add(1); {
		case ev.Reason == "Rejected":
			return true, nil, apierrors.NewBadRequest("no")
		case n <= 2:
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	r := kubeclient.NewRecorder(cs.CoreV1().Events("ns"), source, quiet(), clk)
	defer r.Shutdown()
	r.Eventf(lease, corev1.EventTypeNormal, "LeaderElection", "first")
	for try := 1; try <= 2; try++ {
		if err := testsupport.Eventually(context.Background(), time.Millisecond, 10*time.Second, "a retry timer", func(context.Context) error {
			if !clk.HasWaiters() {
				return errors.New("no timer")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		clk.Step(kubeclient.EventRetryPeriod)
	}
	if got := events(t, cs, 1)[0]; got.Message != "first" || creates.Load() != 3 {
		t.Errorf("wrote %q after %d creates, want \"first\" after 3", got.Message, creates.Load())
	}
	r.Eventf(lease, corev1.EventTypeWarning, "Rejected", "second")
	r.Eventf(lease, corev1.EventTypeNormal, "LeaderElection", "third")
	items := events(t, cs, 2)
	if items[1].Message != "third" && items[0].Message != "third" {
		t.Errorf("events %v", items)
	}
	if creates.Load() != 5 {
		t.Errorf("%d creates, want 5: a rejected event is not sent again", creates.Load())
	}
}

func TestRecorderDropsEventsBeyondItsBurstUntilTheBucketRefills(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	cs := fake.NewClientset()
	r := kubeclient.NewRecorder(cs.CoreV1().Events("ns"), source, quiet(), clk)
	defer r.Shutdown()
	for i := range kubeclient.EventBurst + 5 {
		clk.Step(time.Millisecond) // distinct names
		r.Eventf(lease, corev1.EventTypeNormal, "LeaderElection", "flap %d", i)
	}
	events(t, cs, kubeclient.EventBurst)
	clk.Step(kubeclient.EventRefill)
	r.Eventf(lease, corev1.EventTypeNormal, "LeaderElection", "after the refill")
	r.Eventf(lease, corev1.EventTypeNormal, "LeaderElection", "dropped again")
	items := events(t, cs, kubeclient.EventBurst+1)
	var last []string
	for _, e := range items {
		if !strings.HasPrefix(e.Message, "flap ") {
			last = append(last, e.Message)
		}
	}
	if len(last) != 1 || last[0] != "after the refill" {
		t.Errorf("after the burst: %q, want only \"after the refill\"", last)
	}
}

func TestRecorderShutdownStopsAWaitingRetry(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	cs := fake.NewClientset()
	cs.PrependReactor("create", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	r := kubeclient.NewRecorder(cs.CoreV1().Events("ns"), source, quiet(), clk)
	r.Eventf(lease, corev1.EventTypeNormal, "LeaderElection", "never written")
	if err := testsupport.Eventually(context.Background(), time.Millisecond, 10*time.Second, "a retry timer", func(context.Context) error {
		if !clk.HasWaiters() {
			return errors.New("no timer")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { r.Shutdown(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return while a retry waited")
	}
	r.Eventf(lease, corev1.EventTypeNormal, "LeaderElection", "after Shutdown") // no panic, dropped
}
