package election

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// decideConfig: lease 3s, renew deadline 2s, retry 500ms, margin 200ms.
var decideConfig = Config{Identity: "me", LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond, ClockSkewMargin: 200 * time.Millisecond}

var t0 = time.Unix(1_800_000_000, 0)

func at(d time.Duration) time.Time { return t0.Add(d) }

func lease(holder string, transitions int32, uid string, seconds int32) *coordinationv1.Lease {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "billing", Namespace: "team", UID: types.UID(uid), ResourceVersion: "10"},
		Spec:       coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr(seconds), LeaseTransitions: ptr(transitions)},
	}
	if holder != "" {
		l.Spec.HolderIdentity = ptr(holder)
	}
	return l
}

func TestDecide(t *testing.T) {
	leading := func(token int64, lastRenew time.Duration) *term {
		return &term{token: token, uid: "u1", lastRenew: at(lastRenew), nextRenew: at(lastRenew + 500*time.Millisecond), validUntil: at(lastRenew + 2800*time.Millisecond)}
	}
	tests := []struct {
		name  string
		state state
		now   time.Duration
		want  decision
	}{
		{name: "syncing: nothing until the initial list", state: state{}, now: time.Hour, want: decision{}},

		// Following a held Lease: wait out max(our lease, its lease) from the last change.
		{name: "following waits for expiry", state: state{synced: true, obs: lease("other", 4, "u1", 3), obsTime: at(0), maxSeen: 4},
			now: 2 * time.Second, want: decision{wake: at(3 * time.Second)}},
		{name: "following acquires once expired", state: state{synced: true, obs: lease("other", 4, "u1", 3), obsTime: at(0), maxSeen: 4},
			now: 3 * time.Second, want: decision{action: actAcquire}},
		{name: "following honours a longer leaseDurationSeconds on the Lease", state: state{synced: true, obs: lease("other", 4, "u1", 60), obsTime: at(0), maxSeen: 4},
			now: 10 * time.Second, want: decision{wake: at(60 * time.Second)}},
		{name: "a Lease naming us from an earlier process is waited out too", state: state{synced: true, obs: lease("me", 7, "u1", 3), obsTime: at(0), maxSeen: 7},
			now: time.Second, want: decision{wake: at(3 * time.Second)}},
		{name: "a release seen live is taken at once", state: state{synced: true, obs: lease("", 4, "u1", 3), obsTime: at(0), maxSeen: 4, releaseSeen: true},
			now: 0, want: decision{action: actAcquire}},
		{name: "a free Lease without a release seen is waited out like a held one", state: state{synced: true, obs: lease("", 4, "u1", 3), obsTime: at(0), maxSeen: 4},
			now: 2 * time.Second, want: decision{wake: at(3 * time.Second)}},
		{name: "a free Lease without a release seen is taken once expired", state: state{synced: true, obs: lease("", 4, "u1", 3), obsTime: at(0), maxSeen: 4},
			now: 3 * time.Second, want: decision{action: actAcquire}},
		{name: "a release that kept validity handed out waits for it and the skew margin", state: state{synced: true, obs: lease("", 4, "u1", 3), obsTime: at(0), maxSeen: 4, releaseSeen: true, releaseWait: time.Second},
			now: time.Second, want: decision{wake: at(time.Second + 200*time.Millisecond)}},
		{name: "a release that kept validity handed out is taken after it", state: state{synced: true, obs: lease("", 4, "u1", 3), obsTime: at(0), maxSeen: 4, releaseSeen: true, releaseWait: time.Second},
			now: time.Second + 200*time.Millisecond, want: decision{action: actAcquire}},
		{name: "after a release, hold off for a lease duration", state: state{synced: true, obs: lease("", 4, "u1", 3), obsTime: at(0), maxSeen: 4, holdOff: at(3 * time.Second)},
			now: time.Second, want: decision{wake: at(3 * time.Second)}},
		{name: "a lost race waits for the watch or a refresh, never acquires blind", state: state{synced: true, obs: lease("", 4, "u1", 3), maxSeen: 4, needRefresh: true, refreshAt: at(500 * time.Millisecond)},
			now: 0, want: decision{wake: at(500 * time.Millisecond)}},
		{name: "refresh when due", state: state{synced: true, obs: lease("", 4, "u1", 3), maxSeen: 4, needRefresh: true, refreshAt: at(500 * time.Millisecond)},
			now: 500 * time.Millisecond, want: decision{action: actRefresh}},
		{name: "back-off after a failed write", state: state{synced: true, obs: lease("", 4, "u1", 3), maxSeen: 4, retryAt: at(time.Second)},
			now: 0, want: decision{wake: at(time.Second)}},

		// Contention: a release seen while watching, or an expiry, is taken
		// after this candidate's draw in a window of 2 ms per estimated
		// contender (16 when the Lease carries no estimate, doubled per lost
		// race), at most one retry period; with fewer than 4, at once.
		{name: "a release seen live waits for our draw in the window", state: state{synced: true, obs: lease("", 4, "u1", 3), obsTime: at(0), maxSeen: 4, releaseSeen: true, draw: 0.5},
			now: 0, want: decision{wake: at(16 * time.Millisecond)}},
		{name: "a release seen live is taken when the draw's time comes", state: state{synced: true, obs: lease("", 4, "u1", 3), obsTime: at(0), maxSeen: 4, releaseSeen: true, draw: 0.5},
			now: 16 * time.Millisecond, want: decision{action: actAcquire}},
		{name: "the window grows with the estimate on the Lease, and so does its slot (40: 4 ms each)", state: state{synced: true, obs: lease("", 4, "u1", 3), obsTime: at(0), maxSeen: 4, releaseSeen: true, draw: 0.5, contenders: 40},
			now: 0, want: decision{wake: at(80 * time.Millisecond)}},
		{name: "the window is at most one retry period", state: state{synced: true, obs: lease("", 4, "u1", 3), obsTime: at(0), maxSeen: 4, releaseSeen: true, draw: 0.5, contenders: 100},
			now: 0, want: decision{wake: at(250 * time.Millisecond)}},
		{name: "few contenders: the window is small", state: state{synced: true, obs: lease("", 4, "u1", 3), obsTime: at(0), maxSeen: 4, releaseSeen: true, draw: 0.5, contenders: 4},
			now: 0, want: decision{wake: at(4 * time.Millisecond)}},
		{name: "fewer than 4 contenders: written at once", state: state{synced: true, obs: lease("", 4, "u1", 3), obsTime: at(0), maxSeen: 4, releaseSeen: true, draw: 0.5, contenders: 3.9},
			now: 0, want: decision{action: actAcquire}},
		{name: "fewer than 4 contenders, but we lost a race: spread again", state: state{synced: true, obs: lease("", 4, "u1", 3), obsTime: at(0), maxSeen: 4, releaseSeen: true, draw: 0.5, contenders: 2, lost: 1},
			now: 0, want: decision{wake: at(4 * time.Millisecond)}},
		{name: "the window is at most one retry period", state: state{synced: true, obs: lease("", 4, "u1", 3), obsTime: at(0), maxSeen: 4, releaseSeen: true, draw: 0.9, contenders: 1000},
			now: 0, want: decision{wake: at(450 * time.Millisecond)}},
		{name: "a Lease found free (no release seen) is taken after expiry, spread out", state: state{synced: true, obs: lease("", 4, "u1", 3), obsTime: at(0), maxSeen: 4, draw: 0.25, contenders: 40},
			now: 3 * time.Second, want: decision{wake: at(3*time.Second + 40*time.Millisecond)}},
		{name: "an expiry is spread out too", state: state{synced: true, obs: lease("other", 4, "u1", 3), obsTime: at(0), maxSeen: 4, draw: 0.25, contenders: 40},
			now: 3 * time.Second, want: decision{wake: at(3*time.Second + 40*time.Millisecond)}},
		{name: "our own deleted term is taken back at once, whatever the draw", state: state{synced: true, everSeen: true, ownDeletion: true, lastToken: 6, lastTermUID: "u1", maxSeen: 6, draw: 0.9, contenders: 100},
			now: 0, want: decision{action: actAcquire}},
		{name: "a hold-off after our release outlasts the draw", state: state{synced: true, obs: lease("", 4, "u1", 3), obsTime: at(0), maxSeen: 4, releaseSeen: true, draw: 0.5, holdOff: at(3 * time.Second)},
			now: time.Second, want: decision{wake: at(3 * time.Second)}},

		// Candidacy.
		{name: "withdrawn: a free Lease is not taken", state: state{synced: true, obs: lease("", 4, "u1", 3), obsTime: at(0), maxSeen: 4, withdrawn: "app unhealthy"},
			now: time.Hour, want: decision{}},
		{name: "withdrawn: an absent Lease is not created", state: state{synced: true, withdrawn: "app unhealthy"},
			now: time.Hour, want: decision{}},
		{name: "withdrawn: a lower count is still raised (the holder is kept)", state: state{synced: true, obs: lease("other", 4, "u1", 3), obsTime: at(0), maxSeen: 6, withdrawn: "app unhealthy"},
			now: 0, want: decision{action: actRaise}},
		{name: "withdrawn: a deleted Lease is still restored as it was", state: state{synced: true, everSeen: true, restoreFrom: lease("other", 6, "u1", 3), maxSeen: 6, withdrawn: "app unhealthy"},
			now: 0, want: decision{action: actRestore}},
		{name: "released for a while: a free Lease waits until then", state: state{synced: true, obs: lease("", 4, "u1", 3), obsTime: at(0), maxSeen: 4, outUntil: at(5 * time.Minute)},
			now: time.Second, want: decision{wake: at(5 * time.Minute)}},
		{name: "released for a while: taken after it", state: state{synced: true, obs: lease("", 4, "u1", 3), obsTime: at(0), maxSeen: 4, outUntil: at(5 * time.Minute)},
			now: 5 * time.Minute, want: decision{action: actAcquire}},
		{name: "released for a while: even our own deleted term waits", state: state{synced: true, everSeen: true, ownDeletion: true, lastToken: 6, lastTermUID: "u1", maxSeen: 6, outUntil: at(time.Minute)},
			now: 0, want: decision{wake: at(time.Minute)}},

		// Counting: a follower that saw more than the Lease shows writes it back first.
		{name: "raise a count lower than the highest seen", state: state{synced: true, obs: lease("other", 4, "u1", 3), obsTime: at(0), maxSeen: 6},
			now: 0, want: decision{action: actRaise}},

		// Absent Lease.
		{name: "never seen, none at the initial list: wait one lease duration before creating", state: state{synced: true, notBefore: at(3 * time.Second)},
			now: time.Second, want: decision{wake: at(3 * time.Second)}},
		{name: "never seen: create after the wait", state: state{synced: true, notBefore: at(3 * time.Second)},
			now: 3 * time.Second, want: decision{action: actAcquire}},
		{name: "deleted: restore it as last known first", state: state{synced: true, everSeen: true, restoreFrom: lease("other", 6, "u1", 3), notBefore: at(3 * time.Second), maxSeen: 6},
			now: 0, want: decision{action: actRestore}},
		{name: "deleted, restore failed: create only after notBefore", state: state{synced: true, everSeen: true, notBefore: at(60 * time.Second), maxSeen: 6},
			now: 30 * time.Second, want: decision{wake: at(60 * time.Second)}},
		{name: "restored free Lease is not taken before notBefore", state: state{synced: true, everSeen: true, obs: lease("", 5, "u2", 3), obsTime: at(0), notBefore: at(3 * time.Second), maxSeen: 6},
			now: time.Second, want: decision{action: actRaise}},
		{name: "restored free Lease at the highest count: wait for notBefore", state: state{synced: true, everSeen: true, obs: lease("", 6, "u2", 3), obsTime: at(0), notBefore: at(3 * time.Second), maxSeen: 6},
			now: time.Second, want: decision{wake: at(3 * time.Second)}},
		{name: "our own valid term was deleted: create again at once", state: state{synced: true, everSeen: true, ownDeletion: true, lastToken: 6, lastTermUID: "u1", maxSeen: 6},
			now: 0, want: decision{action: actAcquire}},
		{name: "our own valid term was deleted and restored naming us: take it at once", state: state{synced: true, everSeen: true, ownDeletion: true, lastToken: 6, lastTermUID: "u1", maxSeen: 6, obs: lease("me", 6, "u2", 3), obsTime: at(0), notBefore: at(3 * time.Second)},
			now: 0, want: decision{action: actAcquire}},
		{name: "restored naming us at a count above our token: someone else's term, wait", state: state{synced: true, everSeen: true, ownDeletion: true, lastToken: 6, lastTermUID: "u1", maxSeen: 7, obs: lease("me", 7, "u2", 3), obsTime: at(0)},
			now: 0, want: decision{wake: at(3 * time.Second)}},

		// Leading.
		{name: "leading renews every retry period", state: state{synced: true, obs: lease("me", 5, "u1", 3), maxSeen: 5, term: leading(5, 0)},
			now: 500 * time.Millisecond, want: decision{action: actRenew}},
		{name: "leading sleeps until the next renew", state: state{synced: true, obs: lease("me", 5, "u1", 3), maxSeen: 5, term: leading(5, 0)},
			now: 100 * time.Millisecond, want: decision{wake: at(500 * time.Millisecond)}},
		{name: "leading backs off, but never past the renew deadline", state: state{synced: true, obs: lease("me", 5, "u1", 3), maxSeen: 5, term: leading(5, 0), retryAt: at(5 * time.Second)},
			now: time.Second, want: decision{wake: at(2 * time.Second)}},
		{name: "renew deadline passed: give up", state: state{synced: true, obs: lease("me", 5, "u1", 3), maxSeen: 5, term: leading(5, 0)},
			now: 2 * time.Second, want: decision{action: actGiveUp}},
		{name: "Lease raised above our token: take a new token", state: state{synced: true, obs: lease("me", 9, "u1", 3), maxSeen: 9, term: leading(5, 0)},
			now: 100 * time.Millisecond, want: decision{action: actAcquire}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.state
			s.identity = "me"
			got := decide(&s, &decideConfig, at(tt.now))
			if got != tt.want {
				t.Fatalf("decide = {%v %v}, want {%v %v}", got.action, got.wake.Sub(t0), tt.want.action, tt.want.wake.Sub(t0))
			}
		})
	}
}
