package election

import (
	"fmt"
	"slices"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/tools/cache"
)

// These tests call leaseStore as the reflector does (a list, then watch
// events, a relist after a gap) and assert what it queues for the loop, in
// order.

// queued empties the candidate's inbox and describes each observation.
func queued(c *stepped) []string {
	c.inboxMu.Lock()
	q := c.inbox
	c.inbox = nil
	c.inboxMu.Unlock()
	var out []string
	for _, o := range q {
		switch {
		case o.synced:
			out = append(out, "synced")
		case o.deleted && o.lease == nil:
			out = append(out, "deleted (unknown)")
		case o.deleted:
			out = append(out, fmt.Sprintf("deleted rv %s", o.lease.ResourceVersion))
		default:
			out = append(out, fmt.Sprintf("lease rv %s", o.lease.ResourceVersion))
		}
	}
	return out
}

func leaseAt(rv string) *coordinationv1.Lease {
	l := heldLease("b", 4)
	l.ResourceVersion = rv
	return l
}

func TestStoreQueuesEveryChangeAndTheSyncedMarkerAfterTheFirstListOnly(t *testing.T) {
	c := newFakeAPI(t).stepped("a")
	s := &leaseStore{e: c.Elector}
	steps := []struct {
		name string
		do   func()
		want []string
	}{
		{"initial list", func() { _ = s.Replace([]any{leaseAt("5")}, "5") }, []string{"lease rv 5", "synced"}},
		{"watch: modified", func() { _ = s.Update(leaseAt("6")) }, []string{"lease rv 6"}},
		{"watch: added", func() { _ = s.Add(leaseAt("7")) }, []string{"lease rv 7"}},
		{"relist finds it", func() { _ = s.Replace([]any{leaseAt("8")}, "8") }, []string{"lease rv 8"}},
		{"watch: deleted", func() { _ = s.Delete(leaseAt("9")) }, []string{"deleted rv 9"}},
		{"relist, still absent", func() { _ = s.Replace(nil, "10") }, nil},
		{"resync", func() { _ = s.Resync() }, nil},
	}
	for _, st := range steps {
		st.do()
		if got := queued(c); !slices.Equal(got, st.want) {
			t.Errorf("%s: queued %q, want %q", st.name, got, st.want)
		}
	}
}

// A watch gap that spans a deletion: the relist no longer has the Lease.
// Its last version seen is queued as deleted (what an informer's
// DeletedFinalStateUnknown carries): the loop restores it as it was, and
// its count is seen, so the next token is above it.
func TestRelistThatNoLongerFindsTheLeaseQueuesTheDeletionOfTheLastVersionSeen(t *testing.T) {
	f := newFakeAPI(t)
	c := f.stepped("a")
	s := &leaseStore{e: c.Elector}
	_ = s.Replace([]any{leaseAt("5")}, "5")
	last := leaseAt("6")
	last.Spec.LeaseTransitions = ptr(int32(7))
	_ = s.Update(last)
	queued(c)

	_ = s.Replace(nil, "12")
	if got, want := queued(c), []string{"deleted rv 6"}; !slices.Equal(got, want) {
		t.Fatalf("relist without the Lease queued %q, want %q", got, want)
	}
	// Through the loop (another candidate, the same calls).
	d := f.stepped("d")
	s = &leaseStore{e: d.Elector}
	_ = s.Replace([]any{leaseAt("5")}, "5")
	_ = s.Update(last)
	_ = s.Replace(nil, "12")
	d.drainInbox()
	// The relist does not know the deleted version: acquisitions it never
	// saw may have raised the count, so the count seen is raised past them.
	if d.st.obs != nil || d.st.restoreFrom == nil || transitionsOf(d.st.restoreFrom) != 7 || d.st.maxSeen != 7+unseenAcquisitions {
		t.Errorf("after the relist: obs %v, restoreFrom %v, maxSeen %d; want absent, restore from count 7, maxSeen %d", d.st.obs, d.st.restoreFrom, d.st.maxSeen, 7+unseenAcquisitions)
	}
}

func TestStoreQueuesOnlyTheLeaseItCampaignsOn(t *testing.T) {
	c := newFakeAPI(t).stepped("a")
	s := &leaseStore{e: c.Elector}
	other := leaseAt("3")
	other.Name = "other"
	elsewhere := leaseAt("4")
	elsewhere.Namespace = "elsewhere"
	_ = s.Replace([]any{other, elsewhere, leaseAt("5")}, "5")
	_ = s.Update(other)
	_ = s.Delete(cache.DeletedFinalStateUnknown{Key: "team/other", Obj: other})
	_ = s.Delete(cache.DeletedFinalStateUnknown{Key: "team/billing", Obj: leaseAt("6")})
	if got, want := queued(c), []string{"lease rv 5", "synced", "deleted rv 6"}; !slices.Equal(got, want) {
		t.Errorf("queued %q, want %q", got, want)
	}
}
