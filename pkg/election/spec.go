package election

import (
	"math"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// This file is the lock side of the election, as client-go's resourcelock
// is to its leaderelection: the only code that reads or builds a Lease.
// The algorithm (decide.go) works on what these functions return.

// acquireSpec takes the Lease for identity with a new token. PreferredHolder
// and Strategy of the Lease it replaces (nil: none) are kept.
func acquireSpec(prev *coordinationv1.LeaseSpec, identity string, d time.Duration, token int64, now time.Time) coordinationv1.LeaseSpec {
	s := coordinationv1.LeaseSpec{
		HolderIdentity:       ptr(identity),
		LeaseDurationSeconds: leaseSeconds(d),
		AcquireTime:          microTime(now),
		RenewTime:            microTime(now),
		LeaseTransitions:     ptr(int32(token)),
	}
	if prev != nil {
		s.PreferredHolder, s.Strategy = prev.PreferredHolder, prev.Strategy
	}
	return s
}

// renewSpec extends identity's term. A leaseTransitions lowered by hand is
// put back to the token: the Lease never shows less than a token issued.
func renewSpec(cur coordinationv1.LeaseSpec, identity string, d time.Duration, token int64, now time.Time) coordinationv1.LeaseSpec {
	s := *cur.DeepCopy()
	s.HolderIdentity = ptr(identity)
	s.LeaseDurationSeconds = leaseSeconds(d)
	s.RenewTime = microTime(now)
	s.LeaseTransitions = ptr(int32(max(specTransitions(&cur), token)))
	return s
}

// releaseSpec writes the Lease free (no holder), as client-go's
// ReleaseOnCancel does, so followers take it on the watch event.
func releaseSpec(cur coordinationv1.LeaseSpec, token int64, now time.Time) coordinationv1.LeaseSpec {
	s := *cur.DeepCopy()
	s.HolderIdentity = nil
	s.RenewTime = microTime(now)
	s.LeaseTransitions = ptr(int32(max(specTransitions(&cur), token)))
	return s
}

// restoreSpec puts a deleted Lease back as it was last known: same holder
// (who may still believe it leads, so everyone waits it out), the count at
// the highest value seen, and a fresh renewTime.
func restoreSpec(last coordinationv1.LeaseSpec, maxSeen int64, now time.Time) coordinationv1.LeaseSpec {
	s := *last.DeepCopy()
	s.LeaseTransitions = ptr(int32(max(specTransitions(&last), maxSeen)))
	s.RenewTime = microTime(now)
	return s
}

// raiseSpec lifts leaseTransitions to a value this candidate has seen
// before, keeping everything else (the holder above all): the next
// acquisition then issues a token above every token issued so far.
func raiseSpec(cur coordinationv1.LeaseSpec, maxSeen int64) coordinationv1.LeaseSpec {
	s := *cur.DeepCopy()
	s.LeaseTransitions = ptr(int32(max(specTransitions(&cur), maxSeen)))
	return s
}

func holderOf(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func transitionsOf(l *coordinationv1.Lease) int64 {
	if l == nil {
		return 0
	}
	return specTransitions(&l.Spec)
}

func specTransitions(s *coordinationv1.LeaseSpec) int64 {
	if s.LeaseTransitions == nil {
		return 0
	}
	return int64(*s.LeaseTransitions)
}

func renewTimeOf(l *coordinationv1.Lease) time.Time {
	if l == nil || l.Spec.RenewTime == nil {
		return time.Time{}
	}
	return l.Spec.RenewTime.Time
}

func durationOf(l *coordinationv1.Lease) time.Duration {
	if l == nil || l.Spec.LeaseDurationSeconds == nil {
		return 0
	}
	return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
}

func uidOf(l *coordinationv1.Lease) string {
	if l == nil {
		return ""
	}
	return string(l.UID)
}

// older reports whether a is a strictly older version of the Lease than b.
// Resource versions are comparable integers (KEP-5504); if either is not,
// nothing is judged older and the newer event simply wins. Only informer
// events are filtered with it: a GET or a write's answer is authoritative
// (resource versions go backwards when etcd is restored from a backup).
func older(a, b *coordinationv1.Lease) bool {
	if a == nil || b == nil {
		return false
	}
	c, err := resourceversion.CompareResourceVersion(a.ResourceVersion, b.ResourceVersion)
	return err == nil && c < 0
}

// newest returns the newer of two versions of the Lease (either may be nil).
func newest(a, b *coordinationv1.Lease) *coordinationv1.Lease {
	if a == nil || older(a, b) {
		return b
	}
	return a
}

// recordChanged reports whether the election record differs, the way
// client-go compares raw records: any change restarts the expiry clock.
// The record is the spec and the annotations that say who wrote it and how
// it was given up (record.go, handoff.go); an announcement is not part of
// it.
func recordChanged(a, b *coordinationv1.Lease) bool {
	if a == nil || b == nil {
		return a != b
	}
	for _, k := range recordAnnotations {
		if annotation(a, k) != annotation(b, k) {
			return true
		}
	}
	return a.UID != b.UID || !apiequality.Semantic.DeepEqual(a.Spec, b.Spec)
}

var recordAnnotations = []string{IncarnationAnnotation, ReleasedAnnotation, HandoffAnnotation}

// leaseSeconds rounds a duration up to whole seconds for the Lease.
func leaseSeconds(d time.Duration) *int32 {
	s := int32(math.Ceil(d.Seconds()))
	return &s
}

func microTime(t time.Time) *metav1.MicroTime {
	m := metav1.NewMicroTime(t)
	return &m
}

func ptr[T any](v T) *T { return &v }

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// earliest returns the earlier of two wake-up times; zero means "none".
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
