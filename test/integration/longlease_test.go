package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
)

// TestFarLongerLeaseDurationIsWarned: a hand edit that sets the Lease's
// leaseDurationSeconds far above the candidates' --lease-duration (more
// than election.LongLeaseFactor times) gets a Warning Event on the Lease
// and a warning in the follower's log; the leader's next renewal writes
// its own duration back and it keeps leading.
func TestFarLongerLeaseDurationIsWarned(t *testing.T) {
	g := newGroup(t, testTimings)
	cs := g.start("a", "b")
	leader, r := g.waitLeader(startupTimeout)
	follower := cs[0]
	if follower == leader {
		follower = cs[1]
	}
	const huge = 1_000_000_000 // ~32 years
	g.updateLeaseSpec(func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = ptrTo(int32(huge)) })
	g.leaseEvent(startupTimeout, follower.Spec.Identity+": the Lease's leaseDurationSeconds 1000000000 is more than",
		fmt.Sprintf("%d× this candidate's lease duration %v", election.LongLeaseFactor, testTimings.LeaseDuration))
	g.waitFor(startupTimeout, "the follower's warning in its log", func(context.Context) error {
		if !strings.Contains(follower.Logs(), "leaseDurationSeconds is far above this candidate's --lease-duration") {
			return fmt.Errorf("no warning; log tail:\n%s", follower.LogTail(5))
		}
		return nil
	})
	// The leader renews with its own duration: the footgun is gone again.
	g.waitFor(startupTimeout, "the leader's renewal to write its own duration back", func(ctx context.Context) error {
		l, err := env.cp.Client.CoordinationV1().Leases(g.namespace).Get(ctx, g.lease, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := l.Spec.LeaseDurationSeconds; got == nil || int64(*got) != int64(testTimings.LeaseDuration.Seconds()) {
			return fmt.Errorf("leaseDurationSeconds %v", got)
		}
		return nil
	})
	g.waitRenewed(leader, r.Token)
}
