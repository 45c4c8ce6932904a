package main

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// The physical limit of a handoff, measured by the bench's own probe on the
// same apiserver, at the same moment as the handoffs it is compared with:
// one Lease write (PUT, sent to answered) and one write plus one watch
// delivery (sent to the event read on a watch of the Lease). A handoff
// needs at least the second; ours needs a second write too (the
// successor's own, which starts its validity: pkg/election/handoff.go),
// so the table shows both.

// LimitResult is one probe series.
type LimitResult struct {
	// Write: a Lease PUT, from sending it to its answer.
	Write Dist `json:"writeMs"`
	// WriteWatch: from sending the PUT to reading its event on a watch
	// opened before it (one write + one watch delivery).
	WriteWatch Dist `json:"writeWatchMs"`
}

// twoWritesOneWatch is the p50 of the limit when the successor must also
// write: WriteWatch + Write.
func (r *LimitResult) twoWritesOneWatch() float64 { return r.WriteWatch.P50 + r.Write.P50 }

// probeLimit writes a probe Lease in ns n times, one write at a time, each
// read back from a watch, while whatever the caller runs (a pool of
// candidates) keeps the apiserver as busy as during its handoffs.
func (e *env) probeLimit(ctx context.Context, ns string, n int) (*LimitResult, error) {
	leases := e.cp.Client.CoordinationV1().Leases(ns)
	const name = "bench-limit-probe"
	l, err := leases.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptrTo("probe"), LeaseDurationSeconds: ptrTo(int32(15))},
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		l, err = leases.Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("probe lease: %w", err)
	}
	defer func() { _ = leases.Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{}) }()
	timeout := int64(600)
	w, err := leases.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: l.ResourceVersion, TimeoutSeconds: &timeout})
	if err != nil {
		return nil, fmt.Errorf("probe watch: %w", err)
	}
	defer w.Stop()
	var writes, delivered []time.Duration
	for i := 0; i < n; i++ {
		l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		sent := time.Now()
		got, err := leases.Update(ctx, l, metav1.UpdateOptions{})
		if err != nil {
			return nil, fmt.Errorf("probe write %d: %w", i, err)
		}
		answered := time.Now()
		l = got
		for seen := false; !seen; {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					return nil, fmt.Errorf("probe watch ended at write %d", i)
				}
				if ev.Type != watch.Modified {
					continue
				}
				if m, ok := ev.Object.(*coordinationv1.Lease); ok && m.ResourceVersion == got.ResourceVersion {
					delivered = append(delivered, time.Since(sent))
					seen = true
				}
			case <-time.After(10 * time.Second):
				return nil, fmt.Errorf("probe write %d: no watch event in 10s", i)
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		writes = append(writes, answered.Sub(sent))
		// Apart, as handoffs are (and as an idle apiserver sees them).
		time.Sleep(20 * time.Millisecond)
	}
	return &LimitResult{Write: NewDist(writes, false), WriteWatch: NewDist(delivered, false)}, nil
}

func ptrTo[T any](v T) *T { return &v }
