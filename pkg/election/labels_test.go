package election

import (
	"maps"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
)

var releaseLabels = map[string]string{"app.kubernetes.io/name": "elector-sidecar", "app.kubernetes.io/instance": "billing"}

func withLabels(l map[string]string) func(*Config) {
	return func(c *Config) { c.LeaseLabels = l }
}

func wantLabels(t *testing.T, what string, l *coordinationv1.Lease, want map[string]string) {
	t.Helper()
	if !maps.Equal(l.Labels, want) {
		t.Fatalf("%s: labels %v, want %v", what, l.Labels, want)
	}
}

func TestCreatedLeaseCarriesTheLeaseLabels(t *testing.T) {
	api := newFakeAPI(t)
	api.mutate = withLabels(releaseLabels)
	c := api.stepped("c").seesStored()
	api.clock.Step(ld)
	c.step()
	wantCalls(t, api, "c creates the Lease", "create")
	wantLeads(t, c, 1)
	wantLabels(t, "created", api.lease(), releaseLabels)
}

func TestRestoredLeaseCarriesTheLeaseLabels(t *testing.T) {
	old := heldLease("old", 4)
	api := newFakeAPI(t, old)
	api.mutate = withLabels(releaseLabels)
	f := api.stepped("f").seesStored()
	api.deleteLease()
	f.seesDeleted(old)
	f.step()
	wantCalls(t, api, "f restores", "create")
	wantLabels(t, "restored", api.lease(), releaseLabels)
}

// A Lease created without the labels (by an older sidecar, or by hand)
// gets the missing ones with the next write; labels it has keep their
// values, and other labels stay.
func TestNextWriteAddsOnlyTheMissingLeaseLabels(t *testing.T) {
	l := heldLease("", 1)
	l.Labels = map[string]string{"app.kubernetes.io/name": "set-by-hand", "team": "payments"}
	api := newFakeAPI(t, l)
	api.mutate = withLabels(releaseLabels)
	a := api.stepped("a").seesStored()
	api.waitOutFreeLease()
	a.step()
	wantCalls(t, api, "a acquires", "update")
	wantLeads(t, a, 2)
	wantLabels(t, "after the acquire", api.lease(), map[string]string{
		"app.kubernetes.io/name": "set-by-hand", "app.kubernetes.io/instance": "billing", "team": "payments"})

	// Someone removes a label while a leads: a's next renew puts it back.
	api.handEdit(func(l *coordinationv1.Lease) { delete(l.Labels, "app.kubernetes.io/instance") })
	api.catchUp(a)
	api.clock.Step(rp)
	a.step()
	wantCalls(t, api, "a renews", "update")
	wantLabels(t, "after the renew", api.lease(), map[string]string{
		"app.kubernetes.io/name": "set-by-hand", "app.kubernetes.io/instance": "billing", "team": "payments"})
}

func TestNoLeaseLabelsLeavesTheLeaseUnlabelled(t *testing.T) {
	api := newFakeAPI(t)
	c := api.stepped("c").seesStored()
	api.clock.Step(ld)
	c.step()
	wantCalls(t, api, "c creates the Lease", "create")
	if l := api.lease(); l.Labels != nil {
		t.Fatalf("labels %v, want none", l.Labels)
	}
}

// New copies the labels: a caller that changes its map later changes
// nothing in the election.
func TestNewCopiesTheLeaseLabels(t *testing.T) {
	api := newFakeAPI(t)
	labels := maps.Clone(releaseLabels)
	api.mutate = withLabels(labels)
	c := api.stepped("c").seesStored()
	labels["app.kubernetes.io/instance"] = "changed"
	api.clock.Step(ld)
	c.step()
	wantLabels(t, "created", api.lease(), releaseLabels)
}
