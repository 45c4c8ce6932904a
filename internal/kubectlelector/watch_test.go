package kubectlelector

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

// syncBuffer is a bytes.Buffer safe for the watch goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// watchRun is `kubectl elector watch` running on a fake clientset.
type watchRun struct {
	t      *testing.T
	client *fake.Clientset
	clock  *clocktesting.FakePassiveClock
	out    syncBuffer
	errOut syncBuffer
	cancel context.CancelFunc
	code   chan int
}

func startWatch(t *testing.T, client *fake.Clientset, args ...string) *watchRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &watchRun{t: t, client: client, clock: clocktesting.NewFakePassiveClock(now), cancel: cancel, code: make(chan int, 1)}
	t.Cleanup(w.stop)
	go func() { w.code <- runTo(t, ctx, client, w.clock, &w.out, &w.errOut, args...) }()
	return w
}

// waitLines waits until the output is exactly want (line by line); extra or
// different lines fail at once.
func (w *watchRun) waitLines(want ...string) {
	w.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		got := w.lines()
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				return false, errors.New("different lines")
			}
		}
		if len(got) > len(want) {
			return false, errors.New("more lines")
		}
		return len(got) == len(want), nil
	})
	if err != nil {
		w.t.Fatalf("%v; output:\n%s\nwant:\n%s\nstderr: %s", err, w.out.String(), strings.Join(want, "\n"), w.errOut.String())
	}
}

func (w *watchRun) lines() []string {
	s := strings.TrimSuffix(w.out.String(), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// stop is Ctrl-C: the watch ends with exit 0.
func (w *watchRun) stop() {
	w.t.Helper()
	w.cancel()
	select {
	case code := <-w.code:
		if code != ExitOK {
			w.t.Errorf("watch exited %d after Ctrl-C, want 0; stderr %q", code, w.errOut.String())
		}
		w.code <- code // a second stop sees it too
	case <-time.After(10 * time.Second):
		w.t.Errorf("watch did not stop within 10s of Ctrl-C")
	}
}

func (w *watchRun) update(mutate func(l *coordinationv1.Lease)) {
	w.t.Helper()
	leases := w.client.CoordinationV1().Leases("team")
	l, err := leases.Get(context.Background(), "nightly-run", metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	mutate(l)
	if _, err := leases.Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
		w.t.Fatal(err)
	}
}

func (w *watchRun) at(d time.Duration) string {
	w.clock.SetTime(now.Add(d))
	return now.Add(d).Format(WatchTimeFormat)
}

func TestWatchPrintsALinePerLeadershipChange(t *testing.T) {
	w := startWatch(t, fake.NewClientset(objects()...), "watch", "nightly-run", "-n", "team")
	w.waitLines("2025-06-01T12:00:00.000Z  holder=pod-a  token=7")

	t0 := w.at(time.Second)
	w.update(func(l *coordinationv1.Lease) { // a renewal: no line
		rt := metav1.NewMicroTime(now.Add(time.Second))
		l.Spec.RenewTime = &rt
	})
	w.update(func(l *coordinationv1.Lease) { // released
		l.Spec.HolderIdentity = new(string)
	})
	w.waitLines(
		"2025-06-01T12:00:00.000Z  holder=pod-a  token=7",
		t0+"  holder=<none>  token=7  (released)",
	)

	t1 := w.at(2 * time.Second)
	w.update(func(l *coordinationv1.Lease) {
		h, n := "pod-b", int32(8)
		l.Spec.HolderIdentity, l.Spec.LeaseTransitions = &h, &n
	})
	w.waitLines(
		"2025-06-01T12:00:00.000Z  holder=pod-a  token=7",
		t0+"  holder=<none>  token=7  (released)",
		t1+"  holder=pod-b  token=8",
	)

	t2 := w.at(3 * time.Second)
	w.update(func(l *coordinationv1.Lease) { // the same holder takes a new token
		n := int32(9)
		l.Spec.LeaseTransitions = &n
	})
	w.waitLines(
		"2025-06-01T12:00:00.000Z  holder=pod-a  token=7",
		t0+"  holder=<none>  token=7  (released)",
		t1+"  holder=pod-b  token=8",
		t2+"  holder=pod-b  token=9",
	)

	t4 := w.at(4 * time.Second)
	if err := w.client.CoordinationV1().Leases("team").Delete(context.Background(), "nightly-run", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.waitLines(
		"2025-06-01T12:00:00.000Z  holder=pod-a  token=7",
		t0+"  holder=<none>  token=7  (released)",
		t1+"  holder=pod-b  token=8",
		t2+"  holder=pod-b  token=9",
		t4+"  lease deleted",
	)

	t5 := w.at(5 * time.Second)
	if _, err := w.client.CoordinationV1().Leases("team").Create(context.Background(), lease("team", "nightly-run", "pod-b", 10, 0, 15), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.waitLines(
		"2025-06-01T12:00:00.000Z  holder=pod-a  token=7",
		t0+"  holder=<none>  token=7  (released)",
		t1+"  holder=pod-b  token=8",
		t2+"  holder=pod-b  token=9",
		t4+"  lease deleted",
		t5+"  holder=pod-b  token=10",
	)
}

func TestWatchWaitsForAMissingLease(t *testing.T) {
	client := fake.NewClientset(objects()...)
	w := startWatch(t, client, "watch", "later", "-n", "team")
	w.waitLines("2025-06-01T12:00:00.000Z  lease not found")
	t1 := w.at(15 * time.Second)
	// Another Lease of the namespace changes: no line.
	if err := client.CoordinationV1().Leases("team").Delete(context.Background(), "free", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoordinationV1().Leases("team").Create(context.Background(), lease("team", "later", "pod-a", 1, 0, 15), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.waitLines("2025-06-01T12:00:00.000Z  lease not found", t1+"  holder=pod-a  token=1")
}

func TestWatchFailsAtOnceWithoutAccess(t *testing.T) {
	client := fake.NewClientset(objects()...)
	client.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(coordinationv1.Resource("leases"), "", errors.New(`User "u" cannot list resource "leases" in the namespace "team"`))
	})
	r := runPlugin(t, context.Background(), client, "watch", "nightly-run", "-n", "team")
	want := `Error from server (Forbidden): leases.coordination.k8s.io is forbidden: User "u" cannot list resource "leases" in the namespace "team"` + "\n"
	if r.code != ExitError || r.stderr != want || r.stdout != "" {
		t.Errorf("exit %d, stderr %q, stdout %q; want 1, %q", r.code, r.stderr, r.stdout, want)
	}
}
