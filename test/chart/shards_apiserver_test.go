package chart

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/elector-sidecar/elector-sidecar/pkg/shards"
	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// shardSetLease is a Lease of set as pkg/shards writes it: shard i (i >= 0) or member's session Lease (i < 0).
func shardSetLease(ns, set string, i int, member string, transitions int32) *coordinationv1.Lease {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Labels: map[string]string{shards.SetLabel: set}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(member), LeaseTransitions: ptr.To(transitions), LeaseDurationSeconds: ptr.To[int32](3)},
	}
	if i >= 0 {
		l.Name = shards.ShardLeaseName(set, i)
		l.Labels[shards.RoleLabel], l.Labels[shards.IndexLabel] = shards.RoleShard, strconv.Itoa(i)
	} else {
		l.Name = shards.MemberLeaseName(set, member)
		l.Labels[shards.RoleLabel] = shards.RoleMember
	}
	return l
}

// updateLease reads a Lease, changes it with edit and writes it back, retrying on conflicts.
func updateLease(ctx context.Context, kube kubernetes.Interface, ns, name string, edit func(*coordinationv1.Lease)) error {
	for {
		l, err := kube.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		edit(l)
		_, err = kube.CoordinationV1().Leases(ns).Update(ctx, l, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			return err
		}
	}
}

// wantDenied fails unless err is the guard's Forbidden with every one of msgs.
func wantDenied(t *testing.T, what string, err error, msgs ...string) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Errorf("%s: %v, want Forbidden by the shard set's lease guard", what, err)
		return
	}
	for _, m := range msgs {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("%s: %v, want a message with %q", what, err, m)
		}
	}
}

// testShardSetRoleAndGuard: with election.shards, the chart's Role lets its ServiceAccount do what a member
// of pkg/shards does (list and watch the set by label selector, create and update the shard and session
// Leases, delete a session Lease), and the shard set's lease guard, on the real API server, rejects what
// would break the set's tokens: deleting a shard Lease, lowering or exhausting a token, changing the set's
// labels, writes of the set by anyone but the ServiceAccount (the exempt user and a terminating namespace
// excepted), and writes of the ServiceAccount to Leases outside the set.
func testShardSetRoleAndGuard(t *testing.T, c *cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const ns = "elector-shards"
	r := installChart(t, c, ns, []string{"election.shards=4", "leaseGuard.enabled=true"})
	pod, _ := podSpec(t, r, "Deployment")
	env := envMap(&pod.Spec.InitContainers[0])
	set := env["ELECTOR_LEASE_NAME"]
	if env["ELECTOR_SHARDS"] != "4" {
		t.Fatalf("ELECTOR_SHARDS = %q, want 4", env["ELECTOR_SHARDS"])
	}
	saCfg, err := clientcmd.BuildConfigFromFlags("", saKubeconfig(t, c, ns, pod.Spec.ServiceAccountName))
	if err != nil {
		t.Fatal(err)
	}
	sa := kubernetes.NewForConfigOrDie(saCfg)
	saLeases := sa.CoordinationV1().Leases(ns)
	saUser := "system:serviceaccount:" + ns + ":" + pod.Spec.ServiceAccountName

	// A member's start: it creates the shard Leases and its session Lease.
	for i := range 4 {
		if _, err := saLeases.Create(ctx, shardSetLease(ns, set, i, "pod-a", 1), metav1.CreateOptions{}); err != nil {
			t.Fatalf("ServiceAccount CREATE of shard Lease %d: %v", i, err)
		}
	}
	if _, err := saLeases.Create(ctx, shardSetLease(ns, set, -1, "pod-a", 2), metav1.CreateOptions{}); err != nil {
		t.Fatalf("ServiceAccount CREATE of its session Lease: %v", err)
	}
	shard0, shard1, memberA := shards.ShardLeaseName(set, 0), shards.ShardLeaseName(set, 1), shards.MemberLeaseName(set, "pod-a")
	// From here on the guard is active: the cluster admin (not the set's ServiceAccount) may not delete a shard Lease.
	waitGuardActive(t, c, ns, shard0)

	// One list and one watch of the whole set, by label selector.
	selector := shards.SetLabel + "=" + set
	list, err := saLeases.List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil || len(list.Items) != 5 {
		t.Fatalf("ServiceAccount LIST of %s: %v, %d Leases; want the 4 shards and 1 session", selector, err, len(list.Items))
	}
	w, err := saLeases.Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatalf("ServiceAccount WATCH of %s: %v", selector, err)
	}
	defer w.Stop()

	// A move: shard 1 to pod-b with token + 1 (an UPDATE of the ServiceAccount), seen by the watch.
	if err := updateLease(ctx, sa, ns, shard1, func(l *coordinationv1.Lease) {
		l.Spec.HolderIdentity, l.Spec.LeaseTransitions = ptr.To("pod-b"), ptr.To(*l.Spec.LeaseTransitions+1)
	}); err != nil {
		t.Fatalf("ServiceAccount UPDATE moving shard 1 with token + 1: %v", err)
	}
	select {
	case ev := <-w.ResultChan():
		l, ok := ev.Object.(*coordinationv1.Lease)
		if ev.Type != watch.Modified || !ok || l.Name != shard1 || framework.HolderOf(l) != "pod-b" {
			t.Errorf("watch event %s %T, want shard 1 Modified to pod-b", ev.Type, ev.Object)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("the label-selected watch saw no event for the move of shard 1 within 30s")
	}
	// A renewal of the session Lease (the same term), and a patch of a shard's annotation.
	if err := updateLease(ctx, sa, ns, memberA, func(l *coordinationv1.Lease) { l.Spec.RenewTime = ptr.To(metav1.NowMicro()) }); err != nil {
		t.Errorf("ServiceAccount UPDATE renewing its session Lease: %v", err)
	}
	if _, err := saLeases.Patch(ctx, shard0, "application/merge-patch+json", []byte(`{"metadata":{"annotations":{"`+shards.SessionAnnotation+`":"{}"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("ServiceAccount PATCH of a shard's annotation: %v", err)
	}

	// What the guard forbids the ServiceAccount (which the Role allows).
	wantDenied(t, "ServiceAccount UPDATE lowering shard 1's token", updateLease(ctx, sa, ns, shard1, func(l *coordinationv1.Lease) {
		l.Spec.LeaseTransitions = ptr.To(*l.Spec.LeaseTransitions - 1)
	}), "shard lease "+ns+"/"+shard1, "must not decrease")
	wantDenied(t, "ServiceAccount UPDATE clearing shard 1's token", updateLease(ctx, sa, ns, shard1, func(l *coordinationv1.Lease) {
		l.Spec.LeaseTransitions = nil
	}), "must not decrease")
	wantDenied(t, "ServiceAccount UPDATE lowering its session's term", updateLease(ctx, sa, ns, memberA, func(l *coordinationv1.Lease) {
		l.Spec.LeaseTransitions = ptr.To[int32](1)
	}), "member lease "+ns+"/"+memberA, "must not decrease")
	wantDenied(t, "ServiceAccount UPDATE raising shard 0's token by 10001", updateLease(ctx, sa, ns, shard0, func(l *coordinationv1.Lease) {
		l.Spec.LeaseTransitions = ptr.To(*l.Spec.LeaseTransitions + 10001)
	}), "may rise by at most 10000")
	wantDenied(t, "ServiceAccount UPDATE of shard 0's index label", updateLease(ctx, sa, ns, shard0, func(l *coordinationv1.Lease) {
		l.Labels[shards.IndexLabel] = "3"
	}), "must not change")
	wantDenied(t, "ServiceAccount UPDATE removing shard 0's set label", updateLease(ctx, sa, ns, shard0, func(l *coordinationv1.Lease) {
		delete(l.Labels, shards.SetLabel)
	}), "must not change")
	wantDenied(t, "ServiceAccount DELETE of shard 0", saLeases.Delete(ctx, shard0, metav1.DeleteOptions{}),
		"shard lease "+ns+"/"+shard0, "resets spec.leaseTransitions")
	// Outside the set, the ServiceAccount writes nothing (the Role cannot say so: it grants every Lease).
	wantDenied(t, "ServiceAccount CREATE of a Lease outside the set",
		func() error {
			_, err := saLeases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "other-app", Namespace: ns}}, metav1.CreateOptions{})
			return err
		}(), "is not a Lease of shard set "+set)
	admin := c.kube.CoordinationV1().Leases(ns)
	if _, err := admin.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "other-app", Namespace: ns},
		Spec: coordinationv1.LeaseSpec{LeaseTransitions: ptr.To[int32](9)}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("cluster admin CREATE of a Lease outside the set: %v, want allowed (not the set's)", err)
	}
	wantDenied(t, "ServiceAccount UPDATE of a Lease outside the set", updateLease(ctx, sa, ns, "other-app", func(l *coordinationv1.Lease) {
		l.Spec.HolderIdentity = ptr.To("pod-a")
	}), "is not a Lease of shard set "+set)
	wantDenied(t, "ServiceAccount DELETE of a Lease outside the set", saLeases.Delete(ctx, "other-app", metav1.DeleteOptions{}), "is not a Lease of shard set "+set)
	// `kubectl delete leases --all` as the ServiceAccount: the Role grants no deletecollection.
	if err := saLeases.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("ServiceAccount DELETE of every Lease (DeleteCollection): %v, want Forbidden", err)
	}
	for _, name := range []string{shard0, shard1, shards.ShardLeaseName(set, 2), shards.ShardLeaseName(set, 3), memberA, "other-app"} {
		if _, err := admin.Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("Lease %s: %v, want kept", name, err)
		}
	}
	// A member ends a departed member's session: the ServiceAccount deletes a session Lease.
	if _, err := saLeases.Create(ctx, shardSetLease(ns, set, -1, "pod-gone", 4), metav1.CreateOptions{}); err != nil {
		t.Fatalf("ServiceAccount CREATE of pod-gone's session Lease: %v", err)
	}
	if err := saLeases.Delete(ctx, shards.MemberLeaseName(set, "pod-gone"), metav1.DeleteOptions{}); err != nil {
		t.Errorf("ServiceAccount DELETE of a departed member's session Lease: %v, want allowed", err)
	}
	// Least privilege otherwise: no Leases of another namespace.
	if _, err := sa.CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("ServiceAccount LIST of leases in default: %v, want Forbidden", err)
	}

	// Anyone else: the cluster admin (system:masters, not exempt) may not write the set, by name or by label.
	wantDenied(t, "cluster admin UPDATE of shard 0 (a label)", updateLease(ctx, c.kube, ns, shard0, func(l *coordinationv1.Lease) {
		l.Labels["test"] = "admin"
	}), "only its members, ServiceAccount "+saUser)
	wantDenied(t, "cluster admin DELETE of session Lease pod-a", admin.Delete(ctx, memberA, metav1.DeleteOptions{}), "only its members")
	for _, l := range []*coordinationv1.Lease{
		shardSetLease(ns, set, 9, "intruder", 100),
		{ObjectMeta: metav1.ObjectMeta{Name: "looks-unrelated", Namespace: ns, Labels: map[string]string{shards.SetLabel: set}}},
	} {
		_, err := admin.Create(ctx, l, metav1.CreateOptions{})
		wantDenied(t, "cluster admin CREATE of "+l.Name, err, "only its members")
	}
	// The exempt user (the namespace controller) may (dry run: keep the Lease).
	imp := rest.CopyConfig(c.cfg)
	imp.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:kube-system:namespace-controller", Groups: []string{"system:masters"}}
	nc := kubernetes.NewForConfigOrDie(imp)
	if err := nc.CoordinationV1().Leases(ns).Delete(ctx, shard0, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("dry-run DELETE of shard 0 as the namespace controller: %v, want allowed", err)
	}

	// Deleting the namespace deletes the set (the test deletes as the controller would; envtest runs none).
	if err := c.kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = framework.Eventually(ctx, waitInterval, 30*time.Second, "the set's Leases deleted in the terminating namespace", func(ctx context.Context) error {
		if err := admin.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		l, err := admin.List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(l.Items) > 0 {
			return fmt.Errorf("%d Leases left", len(l.Items))
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}
