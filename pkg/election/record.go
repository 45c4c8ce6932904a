package election

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// The election record beyond the Lease spec, kept in annotations: who wrote
// a term (the process, not only its identity), whether a free Lease was
// released by its holder, and an operator's reset of the count. Like
// spec.go, this file is the only code that reads or writes them.

const (
	// IncarnationAnnotation names the process that wrote the current term:
	// a random mark each process draws at start and writes with every
	// acquire and renew. A term is a process's own only if the Lease
	// carries its mark, so a second process with the same identity (a
	// misconfiguration) can never renew or release another's term.
	IncarnationAnnotation = "elector-sidecar.io/incarnation"
	// ReleasedAnnotation is written by a holder's release (ReleaseRecord,
	// JSON). A follower takes a free Lease at once only when it saw this
	// free version replace the version the record names (same UID, same
	// holder process, same count); any other free Lease (cleared by hand,
	// recreated, restored, or found free at start) is treated as held until
	// it expires on the follower's clock.
	ReleasedAnnotation = "elector-sidecar.io/released"
	// TransitionsResetAnnotation lets an operator lower leaseTransitions:
	// a candidate that sees its value change accepts the Lease's count as
	// the highest seen (a declared reset; see the README's "Recovering an
	// exhausted token"). Without it, a lowered count is raised back.
	TransitionsResetAnnotation = "elector-sidecar.io/transitions-reset"
)

// ReleaseRecord is the value of ReleasedAnnotation.
type ReleaseRecord struct {
	// Token is the count of the term released; Incarnation the releasing
	// process's mark.
	Token       int64  `json:"token"`
	Incarnation string `json:"incarnation"`
	// WaitMs: followers take the Lease no earlier than this long after
	// they see the release (plus the clock skew margin): the longest
	// validity the releasing process had already handed out to its app.
	// 0: the app gave the token back or has exited.
	WaitMs int64 `json:"waitMs,omitempty"`
}

// newIncarnation returns this process's mark: 64 random bits, hex.
func newIncarnation() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	return hex.EncodeToString(b[:])
}

func annotation(l *coordinationv1.Lease, key string) string {
	if l == nil {
		return ""
	}
	return l.Annotations[key]
}

func setAnnotation(l *coordinationv1.Lease, key, value string) {
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[key] = value
}

func incarnationOf(l *coordinationv1.Lease) string { return annotation(l, IncarnationAnnotation) }

// heldBy reports whether l records a term of the process with this
// identity and incarnation.
func heldBy(l *coordinationv1.Lease, identity, incarnation string) bool {
	return l != nil && holderOf(l) == identity && incarnationOf(l) == incarnation
}

// markTerm records on l (a copy about to be written by an acquire or a
// renew) that incarnation writes the term; an earlier release or handoff
// record goes.
func markTerm(l *coordinationv1.Lease, incarnation string) {
	setAnnotation(l, IncarnationAnnotation, incarnation)
	delete(l.Annotations, ReleasedAnnotation)
	delete(l.Annotations, HandoffAnnotation)
}

// markReleased records on l (a copy about to be written free) that the
// process incarnation released its term token, and that followers wait
// at least wait before they take it.
func markReleased(l *coordinationv1.Lease, token int64, incarnation string, wait time.Duration) {
	delete(l.Annotations, HandoffAnnotation)
	ms := (max(wait, 0) + time.Millisecond - 1) / time.Millisecond // rounded up
	b, _ := json.Marshal(ReleaseRecord{Token: token, Incarnation: incarnation, WaitMs: int64(ms)})
	setAnnotation(l, ReleasedAnnotation, string(b))
}

// released reports whether l, a free version seen right after prev, is
// prev's holder's own release of prev's term on the same Lease, and how
// long followers still wait (the validity handed out).
func released(prev, l *coordinationv1.Lease) (time.Duration, bool) {
	if prev == nil || l == nil || holderOf(l) != "" || holderOf(prev) == "" || uidOf(prev) != uidOf(l) {
		return 0, false
	}
	var r ReleaseRecord
	if err := json.Unmarshal([]byte(annotation(l, ReleasedAnnotation)), &r); err != nil {
		return 0, false
	}
	if r.Incarnation == "" || r.Incarnation != incarnationOf(prev) || r.Token != transitionsOf(prev) || r.Token != transitionsOf(l) || r.WaitMs < 0 {
		return 0, false
	}
	return time.Duration(r.WaitMs) * time.Millisecond, true
}

// releasedBy returns the incarnation that l's release record names ("":
// none or unreadable).
func releasedBy(l *coordinationv1.Lease) string {
	var r ReleaseRecord
	if json.Unmarshal([]byte(annotation(l, ReleasedAnnotation)), &r) != nil {
		return ""
	}
	return r.Incarnation
}

// restoredRecord keeps, on a Lease restored after a deletion, what still
// holds: the holder's mark (so that holder may take its term back) and the
// reset marker; never a release record (a restored free Lease is not a
// release anyone saw).
func restoredRecord(from, l *coordinationv1.Lease) {
	for _, k := range []string{IncarnationAnnotation, TransitionsResetAnnotation} {
		if v := annotation(from, k); v != "" {
			setAnnotation(l, k, v)
		}
	}
}
