package election

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
)

// drainEvents returns the Events recorded so far.
func drainEvents(r *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// TestFarLongerLeaseDurationIsWarnedOncePerValue: a Lease whose
// leaseDurationSeconds is more than LongLeaseFactor times the candidate's
// own lease duration gets one Warning Event per value seen; 10× exactly,
// and renewals that keep the value, get none; the follower's wait is the
// Lease's duration all the same (the warning changes no decision).
func TestFarLongerLeaseDurationIsWarnedOncePerValue(t *testing.T) {
	api := newFakeAPI(t, heldLease("a", 1))
	b := api.stepped("b").seesStored()
	if ev := drainEvents(b.events); len(ev) != 0 {
		t.Fatalf("events for a Lease of our own duration: %q", ev)
	}
	edit := func(seconds int32) {
		api.handEdit(func(l *coordinationv1.Lease) {
			l.Spec.LeaseDurationSeconds = ptr(seconds)
			l.Spec.RenewTime = &metav1.MicroTime{Time: api.clock.Now()}
		})
		api.catchUp(b)
	}
	edit(int32(LongLeaseFactor * ld / time.Second)) // exactly 10×: no warning
	if ev := drainEvents(b.events); len(ev) != 0 {
		t.Fatalf("events for a Lease of exactly %d× our duration: %q", LongLeaseFactor, ev)
	}
	const huge = 1_000_000_000 // ~32 years
	edit(huge)
	ev := drainEvents(b.events)
	if len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning LeaderElection b: the Lease's leaseDurationSeconds 1000000000 is more than 10× this candidate's lease duration 3s") {
		t.Fatalf("events after the hand edit: %q, want one warning", ev)
	}
	edit(huge) // a renewal with the same value
	if ev := drainEvents(b.events); len(ev) != 0 {
		t.Fatalf("a second warning for the same value: %q", ev)
	}
	// The decision is unchanged: the follower still waits the Lease's duration.
	api.clock.Step(100 * ld)
	b.step()
	wantCalls(t, api, "b waits out the long Lease")
}
