package election

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/diff"
)

func TestLeaseSpecBuilders(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	t1 := t0.Add(2 * time.Second)
	held := coordinationv1.LeaseSpec{
		HolderIdentity: ptr("a"), LeaseDurationSeconds: ptr(int32(15)),
		AcquireTime: microTime(t0), RenewTime: microTime(t0), LeaseTransitions: ptr(int32(7)),
		PreferredHolder: ptr("b"), Strategy: ptr(coordinationv1.OldestEmulationVersion),
	}
	lowered := *held.DeepCopy()
	lowered.LeaseTransitions = ptr(int32(2))
	tests := []struct {
		name string
		got  coordinationv1.LeaseSpec
		want coordinationv1.LeaseSpec
	}{
		{
			name: "acquire a new Lease",
			got:  acquireSpec(nil, "c", 3*time.Second, 1, t1),
			want: coordinationv1.LeaseSpec{HolderIdentity: ptr("c"), LeaseDurationSeconds: ptr(int32(3)), AcquireTime: microTime(t1), RenewTime: microTime(t1), LeaseTransitions: ptr(int32(1))},
		},
		{
			name: "acquire keeps preferredHolder and strategy, rounds the duration up",
			got:  acquireSpec(&held, "c", 2500*time.Millisecond, 8, t1),
			want: coordinationv1.LeaseSpec{HolderIdentity: ptr("c"), LeaseDurationSeconds: ptr(int32(3)), AcquireTime: microTime(t1), RenewTime: microTime(t1), LeaseTransitions: ptr(int32(8)), PreferredHolder: ptr("b"), Strategy: ptr(coordinationv1.OldestEmulationVersion)},
		},
		{
			name: "renew moves renewTime only",
			got:  renewSpec(held, "a", 15*time.Second, 7, t1),
			want: func() coordinationv1.LeaseSpec { s := *held.DeepCopy(); s.RenewTime = microTime(t1); return s }(),
		},
		{
			name: "renew puts a hand-lowered count back to the token",
			got:  renewSpec(lowered, "a", 15*time.Second, 7, t1),
			want: func() coordinationv1.LeaseSpec { s := *held.DeepCopy(); s.RenewTime = microTime(t1); return s }(),
		},
		{
			name: "release clears the holder, keeps the count",
			got:  releaseSpec(held, 7, t1),
			want: func() coordinationv1.LeaseSpec {
				s := *held.DeepCopy()
				s.HolderIdentity, s.RenewTime = nil, microTime(t1)
				return s
			}(),
		},
		{
			name: "release never lowers below the token",
			got:  releaseSpec(lowered, 7, t1),
			want: func() coordinationv1.LeaseSpec {
				s := *held.DeepCopy()
				s.HolderIdentity, s.RenewTime = nil, microTime(t1)
				return s
			}(),
		},
		{
			name: "restore keeps the holder and lifts the count to the highest seen",
			got:  restoreSpec(held, 9, t1),
			want: func() coordinationv1.LeaseSpec {
				s := *held.DeepCopy()
				s.LeaseTransitions, s.RenewTime = ptr(int32(9)), microTime(t1)
				return s
			}(),
		},
		{
			name: "restore never lowers the count",
			got:  restoreSpec(held, 3, t1),
			want: func() coordinationv1.LeaseSpec { s := *held.DeepCopy(); s.RenewTime = microTime(t1); return s }(),
		},
		{
			name: "raise changes only the count",
			got:  raiseSpec(lowered, 7),
			want: held,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !apiequality.Semantic.DeepEqual(tt.got, tt.want) {
				t.Fatalf("spec differs (-want +got):\n%s", diff.Diff(tt.want, tt.got))
			}
		})
	}
}

func TestBuildersDoNotShareMemoryWithTheirInput(t *testing.T) {
	in := coordinationv1.LeaseSpec{HolderIdentity: ptr("a"), LeaseTransitions: ptr(int32(4))}
	out := renewSpec(in, "a", time.Second, 4, time.Unix(0, 0))
	*out.LeaseTransitions = 99
	out2 := releaseSpec(in, 4, time.Unix(0, 0))
	*out2.LeaseTransitions = 98
	if *in.LeaseTransitions != 4 || *in.HolderIdentity != "a" {
		t.Fatalf("input changed: %+v", in)
	}
}
