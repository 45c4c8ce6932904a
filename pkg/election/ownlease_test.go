package election

import "testing"

// Config.OwnLease (a shard set's session Lease, package shards): a Lease
// that only this process campaigns on and whose tokens nobody else serves
// is created at once when the first list finds it absent; any other Lease
// found absent is waited out for a lease duration (its holder may still
// serve a term on a version this process never saw).
func TestAnOwnLeaseFoundAbsentIsCreatedAtOnceAnyOtherALeaseDurationLater(t *testing.T) {
	for _, own := range []bool{true, false} {
		api := newFakeAPI(t)
		api.mutate = func(c *Config) { c.OwnLease = own }
		a := api.stepped("a").seesStored()
		a.step()
		if !own {
			wantCalls(t, api, "a shared Lease found absent, at once", []string{}...)
			if a.Status().IsLeader || api.lease() != nil {
				t.Fatalf("a shared Lease found absent was taken before a lease duration: %+v", a.Status())
			}
			api.clock.Step(ld - rp)
			a.step()
			wantCalls(t, api, "a shared Lease found absent, before a lease duration", []string{}...)
			api.clock.Step(2 * rp)
			a.step()
		}
		wantCalls(t, api, "the Lease created", "create")
		if s := a.Status(); !s.IsLeader || s.Token != 1 {
			t.Fatalf("own=%v: after its create a is not leading with token 1: %+v", own, s)
		}
	}
}
