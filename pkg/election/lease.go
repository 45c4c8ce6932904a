package election

import (
	"math"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
)

func holderOf(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func transitionsOf(l *coordinationv1.Lease) int64 {
	if l == nil || l.Spec.LeaseTransitions == nil {
		return 0
	}
	return int64(*l.Spec.LeaseTransitions)
}

func durationOf(l *coordinationv1.Lease) time.Duration {
	if l == nil || l.Spec.LeaseDurationSeconds == nil {
		return 0
	}
	return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
}

// older reports whether a is a strictly older version of the Lease than b.
// Resource versions are comparable integers (KEP-5504); if either is not,
// nothing is judged older and the newer event simply wins.
func older(a, b *coordinationv1.Lease) bool {
	if a == nil || b == nil {
		return false
	}
	c, err := resourceversion.CompareResourceVersion(a.ResourceVersion, b.ResourceVersion)
	return err == nil && c < 0
}

// recordChanged reports whether the election record differs, the way
// client-go compares raw records: any change restarts the expiry clock.
func recordChanged(a, b *coordinationv1.Lease) bool {
	if a == nil || b == nil {
		return a != b
	}
	return a.UID != b.UID || !apiequality.Semantic.DeepEqual(a.Spec, b.Spec)
}

// leaseSeconds rounds a duration up to whole seconds for the Lease.
func leaseSeconds(d time.Duration) *int32 {
	s := int32(math.Ceil(d.Seconds()))
	return &s
}

func microNow(t time.Time) *metav1.MicroTime {
	m := metav1.NewMicroTime(t)
	return &m
}

func ptr[T any](v T) *T { return &v }
