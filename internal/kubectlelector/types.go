package kubectlelector

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// OutputVersion is the apiVersion of `kubectl elector status -o json|yaml`.
// It is an output format, not an API the cluster serves.
var OutputVersion = schema.GroupVersion{Group: "elector-sidecar.io", Version: "v1alpha1"}

// LeaseStatus is one Lease as `status -o json|yaml` prints it (kind
// LeaseStatus for one Lease, LeaseStatusList for several).
type LeaseStatus struct {
	metav1.TypeMeta `json:",inline"`
	Namespace       string `json:"namespace"`
	Name            string `json:"name"`
	UID             string `json:"uid"`
	// Holder is spec.holderIdentity; "" when the Lease is free.
	Holder string `json:"holder"`
	// Token is spec.leaseTransitions: the holder's fencing token.
	Token int64 `json:"token"`
	// RenewTime is spec.renewTime as written by the holder's clock.
	RenewTime *metav1.MicroTime `json:"renewTime,omitempty"`
	// RenewedAgoMs is ObservedAt - RenewTime (0 if RenewTime is in the future).
	RenewedAgoMs *int64 `json:"renewedAgoMs,omitempty"`
	// LeaseDurationSeconds is spec.leaseDurationSeconds.
	LeaseDurationSeconds *int32 `json:"leaseDurationSeconds,omitempty"`
	// ExpiresInMs is RenewTime + LeaseDurationSeconds - ObservedAt, at least
	// 0; absent when the Lease is free or lacks renewTime or duration.
	ExpiresInMs *int64 `json:"expiresInMs,omitempty"`
	// Expired: a holder is named but its lease has run out.
	Expired bool `json:"expired"`
	// ObservedAt is the local time the relative fields are computed from.
	ObservedAt metav1.MicroTime `json:"observedAt"`
	// Events are the last Events on the Lease, oldest first (only when one
	// Lease is asked for).
	Events []LeaseEvent `json:"events,omitempty"`
}

// LeaseEvent is one Kubernetes Event on the Lease.
type LeaseEvent struct {
	Time    metav1.Time `json:"time"`
	Type    string      `json:"type"`
	Reason  string      `json:"reason"`
	Source  string      `json:"source"`
	Message string      `json:"message"`
	Count   int32       `json:"count,omitempty"`
	// Lease is the Lease the Event is on: set only among a shard set's
	// Events (`status SET`), which are on several Leases.
	Lease string `json:"lease,omitempty"`
}

// LeaseStatusList is several Leases.
type LeaseStatusList struct {
	metav1.TypeMeta `json:",inline"`
	Items           []LeaseStatus `json:"items"`
	// ShardSets are the shard sets among the Leases (shardset.go); their
	// Leases are not in Items.
	ShardSets []ShardSetStatus `json:"shardSets,omitempty"`
}

// DeepCopyObject implements runtime.Object.
func (s *LeaseStatus) DeepCopyObject() runtime.Object {
	if s == nil {
		return nil
	}
	out := *s
	if s.RenewTime != nil {
		t := *s.RenewTime
		out.RenewTime = &t
	}
	if s.RenewedAgoMs != nil {
		v := *s.RenewedAgoMs
		out.RenewedAgoMs = &v
	}
	if s.LeaseDurationSeconds != nil {
		v := *s.LeaseDurationSeconds
		out.LeaseDurationSeconds = &v
	}
	if s.ExpiresInMs != nil {
		v := *s.ExpiresInMs
		out.ExpiresInMs = &v
	}
	if s.Events != nil {
		out.Events = append([]LeaseEvent(nil), s.Events...)
	}
	return &out
}

// DeepCopyObject implements runtime.Object.
func (l *LeaseStatusList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	out := &LeaseStatusList{TypeMeta: l.TypeMeta}
	for i := range l.Items {
		out.Items = append(out.Items, *l.Items[i].DeepCopyObject().(*LeaseStatus))
	}
	for i := range l.ShardSets {
		out.ShardSets = append(out.ShardSets, l.ShardSets[i].deepCopy())
	}
	return out
}

func statusTypeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: OutputVersion.String(), Kind: kind}
}
