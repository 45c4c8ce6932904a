package election

import "fmt"

// LossReason says why a term ended without a release. Its value is the
// elector_losses_total label; Describe is what logs and Events say.
type LossReason string

// The reasons a term is lost.
const (
	// LossRenewDeadline: renewals failed for the renew deadline.
	LossRenewDeadline LossReason = "renew_deadline"
	// LossTaken: the Lease names another holder.
	LossTaken LossReason = "taken"
	// LossDeleted: the Lease was deleted.
	LossDeleted LossReason = "deleted"
	// LossRecreated: the Lease was deleted and created again (a new UID).
	LossRecreated LossReason = "recreated"
	// LossSuperseded: the Lease's leaseTransitions was raised above this
	// term's token (by hand, or by a candidate that had seen a higher
	// count); the term is replaced by a new one with a higher token.
	LossSuperseded LossReason = "superseded"
)

// lossReasons lists every reason, for the metric's zero series.
var lossReasons = []LossReason{LossRenewDeadline, LossTaken, LossDeleted, LossRecreated, LossSuperseded}

// Describe is the reason in words; holder is the Lease's holder now.
func (r LossReason) Describe(holder string) string {
	switch r {
	case LossRenewDeadline:
		return "renew deadline exceeded"
	case LossTaken:
		return fmt.Sprintf("lease taken by %q", holder)
	case LossDeleted:
		return "lease deleted"
	case LossRecreated:
		return "lease was recreated"
	case LossSuperseded:
		return "leaseTransitions raised above the token"
	default:
		return string(r)
	}
}
