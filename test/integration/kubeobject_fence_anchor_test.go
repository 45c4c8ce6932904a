package integration

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// TestKubeObjectFenceHolderCheckFollowsTheLeaseAfterTheFenceWasRemoved: the
// fence's Lease anchor at work. The API server stops its Lease informer for
// admission for good once no binding of a policy with a Lease parameter is
// left (kubernetes/kubernetes#130887): a holder check installed afterwards
// judges every write against the Lease as it was then. The chart's anchor
// is such a binding, kept by helm. Here the fence is uninstalled (the anchor
// stays), installed again, and the Lease taken over: the holder check must
// admit the new holder and reject the old one. Without the anchor in the
// chart this fails, and every later holder check on this API server too.
func TestKubeObjectFenceHolderCheckFollowsTheLeaseAfterTheFenceWasRemoved(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns, err := env.cp.CreateNamespace(ctx, "fence-anchor")
	if err != nil {
		t.Fatal(err)
	}
	leases := env.cp.Client.CoordinationV1().Leases(ns)
	lease, err := leases.Create(ctx, leaseObject("leader", "pod-0", 1), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f := installFence(t, ctx, ns, "leader", true)
	if _, err := f.writer("pod-0", configMapsGVR).Create(ctx, 1, fencedObject(configMapsGVR, "plan", nil)); err != nil {
		t.Fatalf("first write of the holder: %v", err)
	}
	f.uninstall()
	f = installFence(t, ctx, ns, "leader", true)

	holder, transitions := "pod-1", int32(2)
	lease.Spec.HolderIdentity, lease.Spec.LeaseTransitions = &holder, &transitions
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cur := f.get(configMapsGVR, "plan")
	newRes, oldRes := f.as("pod-1").Resource(configMapsGVR).Namespace(ns), f.as("pod-0").Resource(configMapsGVR).Namespace(ns)
	err = framework.Eventually(ctx, framework.PollInterval, 30*time.Second, "the holder check to judge by the Lease after the takeover", func(ctx context.Context) error {
		if err := dryRunUpdate(ctx, newRes, 2, cur); err != nil {
			return err
		}
		if err := dryRunUpdate(ctx, oldRes, 1, cur); !errors.Is(err, fencing.ErrStaleToken) {
			return errors.Join(errors.New("the old holder pod-0 with token 1 was not rejected as stale"), err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%v\nthe API server's Lease informer for admission stopped when the fence was uninstalled "+
			"(kubernetes/kubernetes#130887): the fence's Lease anchor (charts/elector-sidecar/templates/fence-policy.yaml) "+
			"is the binding that keeps it running", err)
	}
}
