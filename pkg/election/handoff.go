package election

import (
	"cmp"
	"context"
	"encoding/json"
	"hash/fnv"
	"math"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The direct handoff (Config.DirectHandoff). A release makes every follower
// race for the free Lease: the release write, a watch event to each, a
// spread window (contend.go), then the winner's write. Instead, a leader
// that steps down writes the Lease held by one successor it knows to be a
// candidate, with the next token, and only that successor takes it: no
// race and no window.
//
// Candidates announce themselves on the Lease once (a merge patch of one
// annotation, CandidateAnnotationPrefix + a hash of the identity: no
// conflict with the leader's writes), and take the announcement back when
// they leave the election; a leader's renew carries its own. A leader
// hands off to the most recent announcement.
//
// The successor serves its token only after its own write has landed (the
// acceptance, a compare-and-swap on the handoff's version): its validity
// starts when it sent that write, as every term's does. It cannot start on
// the handoff write itself: the successor would have to know when that
// write was sent, on its own clock, and without a bound on clock offsets
// or watch delays it only knows that it came before it saw it (the wrong
// side). So a handoff costs two writes and one watch event, against a
// release's two writes, one event and the spread window.
//
// The rules:
//   - a handoff is written only by the holder's process, on its own term
//     (a compare-and-swap), with leaseTransitions one above every count it
//     has seen, the successor's identity and incarnation, and a record
//     (HandoffAnnotation) naming the giver's process, its token and the
//     validity its app still holds (as a release record does);
//   - it counts as a handoff only for a candidate that saw it replace the
//     term it names (same UID, giver's process, count + 1); any other
//     Lease with such a record is treated as held;
//   - the successor accepts it (no earlier than the validity still held,
//     plus the skew margin) only if it has seen no higher count, and
//     serves from the send time of its accepting write;
//   - the other followers may take a handoff that was not accepted after
//     the same wait plus one retry period (the successor may be dead): the
//     successor never served it, and of its acceptance and their
//     acquisition the compare-and-swap lets one land.

const (
	// CandidateAnnotationPrefix: CandidateAnnotationPrefix + a hash of the
	// identity is a candidate's announcement (CandidateRecord, JSON).
	CandidateAnnotationPrefix = "candidate.elector-sidecar.io/"
	// HandoffAnnotation is written by a handoff (HandoffRecord, JSON) and
	// removed by the successor's acceptance.
	HandoffAnnotation = "elector-sidecar.io/handoff"
)

// CandidateRecord is a candidate's announcement.
type CandidateRecord struct {
	Identity    string `json:"identity"`
	Incarnation string `json:"incarnation"`
	// Since: when it announced (its wall clock, RFC 3339): the leader
	// prefers the most recent, the likeliest to be alive.
	Since string `json:"since"`
}

// HandoffRecord is the value of HandoffAnnotation.
type HandoffRecord struct {
	// From is the giver's incarnation, Token its term's count.
	From  string `json:"from"`
	Token int64  `json:"token"`
	// WaitMs: the validity the giver's app still holds; the successor
	// accepts no earlier than this (plus the skew margin) after it saw the
	// handoff. 0: the app gave the token back or has exited.
	WaitMs int64 `json:"waitMs,omitempty"`
}

// candidateKey is identity's announcement key.
func candidateKey(identity string) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(identity))
	return CandidateAnnotationPrefix + strconv.FormatUint(h.Sum64(), 16)
}

// announcement returns identity's announcement on l.
func announcement(l *coordinationv1.Lease, identity string) (CandidateRecord, bool) {
	var r CandidateRecord
	v := annotation(l, candidateKey(identity))
	if v == "" || json.Unmarshal([]byte(v), &r) != nil || r.Identity != identity {
		return CandidateRecord{}, false
	}
	return r, true
}

// announced reports whether l carries this process's announcement.
func announced(l *coordinationv1.Lease, identity, incarnation string) bool {
	r, ok := announcement(l, identity)
	return ok && r.Incarnation == incarnation
}

// candidateValue is this process's announcement as written.
func candidateValue(identity, incarnation string, now time.Time) string {
	b, _ := json.Marshal(CandidateRecord{Identity: identity, Incarnation: incarnation, Since: now.UTC().Format(time.RFC3339Nano)})
	return string(b)
}

// successor picks whom a leader hands off to: the most recent
// announcement on l of another identity (ok false: none).
func successor(l *coordinationv1.Lease, self string) (CandidateRecord, bool) {
	var best CandidateRecord
	var bestAt time.Time
	for k, v := range l.Annotations {
		if !strings.HasPrefix(k, CandidateAnnotationPrefix) {
			continue
		}
		var r CandidateRecord
		if json.Unmarshal([]byte(v), &r) != nil || r.Identity == "" || r.Incarnation == "" || r.Identity == self || k != candidateKey(r.Identity) {
			continue
		}
		at, _ := time.Parse(time.RFC3339Nano, r.Since)
		if best.Identity == "" || at.After(bestAt) || (at.Equal(bestAt) && r.Identity < best.Identity) {
			best, bestAt = r, at
		}
	}
	return best, best.Identity != ""
}

// markHandoff records on l (a copy about to be written by the giver) the
// successor's process and the giver's record; a release record goes.
func markHandoff(l *coordinationv1.Lease, to CandidateRecord, from string, token int64, wait time.Duration) {
	setAnnotation(l, IncarnationAnnotation, to.Incarnation)
	delete(l.Annotations, ReleasedAnnotation)
	ms := (max(wait, 0) + time.Millisecond - 1) / time.Millisecond
	b, _ := json.Marshal(HandoffRecord{From: from, Token: token, WaitMs: int64(ms)})
	setAnnotation(l, HandoffAnnotation, string(b))
}

// pruneSuccessor drops, from l (our acquisition of a handoff its successor
// did not accept), the successor's announcement: it may be gone. If it is
// not, it announces itself again.
func pruneSuccessor(s *state, l *coordinationv1.Lease) {
	if s.handoffSeen && !heldBy(s.obs, s.identity, s.incarnation) {
		delete(l.Annotations, candidateKey(holderOf(s.obs)))
	}
}

// handoffPending: l is a handoff its successor has not accepted (it
// carries the record its acceptance removes).
func handoffPending(l *coordinationv1.Lease) bool { return annotation(l, HandoffAnnotation) != "" }

// handedOff reports whether l, seen right after prev, is prev's holder's
// own handoff of prev's term on the same Lease, and the wait it records.
func handedOff(prev, l *coordinationv1.Lease) (time.Duration, bool) {
	if prev == nil || l == nil || holderOf(prev) == "" || holderOf(l) == "" || uidOf(prev) != uidOf(l) {
		return 0, false
	}
	var r HandoffRecord
	if err := json.Unmarshal([]byte(annotation(l, HandoffAnnotation)), &r); err != nil {
		return 0, false
	}
	if r.From == "" || r.From != incarnationOf(prev) || r.Token != transitionsOf(prev) || transitionsOf(l) != r.Token+1 || incarnationOf(l) == "" || r.WaitMs < 0 {
		return 0, false
	}
	return time.Duration(r.WaitMs) * time.Millisecond, true
}

// handoffWait is how long after seeing a handoff its successor waits
// before it accepts: the validity the giver's app still held, plus the
// skew margin when there is any.
func handoffWait(s *state, c *Config) time.Duration {
	if s.handoffWait > 0 {
		return s.handoffWait + c.ClockSkewMargin
	}
	return 0
}

// mayAccept: the observed Lease is a handoff to this process, seen as
// such, and no higher count was seen (its token would not be above every
// token issued).
func mayAccept(s *state) bool {
	return s.handoffSeen && s.term == nil && heldBy(s.obs, s.identity, s.incarnation) && s.maxSeen == transitionsOf(s.obs)
}

// wantAnnounced: this process's announcement should be on the Lease
// (campaigning, not released for a while, not just stepped down), or not.
func wantAnnounced(s *state, c *Config, now time.Time) bool {
	return c.DirectHandoff && s.withdrawn == "" && !now.Before(s.outUntil) && !now.Before(s.holdOff)
}

// announceChangesAt is when wantAnnounced turns true by itself (zero:
// not pending).
func announceChangesAt(s *state, c *Config, now time.Time) time.Time {
	if !c.DirectHandoff || s.obs == nil || s.term != nil {
		return time.Time{}
	}
	at := s.announceAfter
	if s.withdrawn == "" {
		at = laterOf(at, laterOf(s.outUntil, s.holdOff))
	}
	if now.Before(at) {
		return at
	}
	return time.Time{}
}

// mustAnnounce: the Lease's announcement of this process is not what it
// should be, and a follower's patch must fix it (a leader's renew carries
// its own).
//
// At most one patch per lease duration: two processes with one identity (a
// misconfiguration, reported as a collision) overwrite each other's
// announcement, and must not do so in a loop.
func mustAnnounce(s *state, c *Config, now time.Time) bool {
	if s.obs == nil || s.term != nil || !c.DirectHandoff || now.Before(s.announceAfter) {
		return false
	}
	return wantAnnounced(s, c, now) != announced(s.obs, s.identity, s.incarnation)
}

// announce adds or removes this process's announcement with a merge patch
// (no resourceVersion: it never conflicts with the leader's writes).
func (e *Elector) announce(ctx context.Context) {
	e.patchAnnouncement(ctx, wantAnnounced(&e.st, &e.cfg, e.clock.Now()))
}

// withdrawAnnouncement takes this follower's announcement back as it
// exits, so that no leader hands off to it (best effort: a handoff to a
// candidate that is gone is taken by the others after a retry period).
func (e *Elector) withdrawAnnouncement(ctx context.Context) {
	s := &e.st
	if !e.cfg.DirectHandoff || s.obs == nil || s.term != nil || !announced(s.obs, e.cfg.Identity, s.incarnation) {
		return
	}
	e.patchAnnouncement(ctx, false)
}

func (e *Elector) patchAnnouncement(ctx context.Context, add bool) {
	s := &e.st
	s.announceAfter = e.clock.Now().Add(e.cfg.LeaseDuration)
	var v any // nil removes it
	if add {
		v = candidateValue(e.cfg.Identity, s.incarnation, e.clock.Now())
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         uidOf(s.obs), // a precondition: not on a Lease created since
		"annotations": map[string]any{candidateKey(e.cfg.Identity): v},
	}})
	reqCtx, cancel := context.WithTimeout(ctx, e.cfg.RenewDeadline)
	defer cancel()
	got, err := e.leases.Patch(reqCtx, e.cfg.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		e.writeFailed("patch", "announcing this candidate", err)
		return
	}
	e.observe(got, true)
}

// accept takes the handoff: the successor's own write, whose send time
// starts its validity.
func (e *Elector) accept(ctx context.Context) {
	s := &e.st
	token := transitionsOf(s.obs)
	sent := e.clock.Now()
	l := s.obs.DeepCopy()
	l.Spec = renewSpec(l.Spec, e.cfg.Identity, e.cfg.LeaseDuration, token, sent)
	markTerm(l, s.incarnation)
	e.addLabels(l)
	reqCtx, cancel := context.WithTimeout(ctx, e.cfg.RenewDeadline)
	defer cancel()
	s.pendingToken = token
	got, err := e.leases.Update(reqCtx, l, metav1.UpdateOptions{})
	if err != nil {
		if isAPIStatus(err) {
			s.pendingToken = 0
		}
		e.writeFailed("update", "accepting the handoff", err)
		return
	}
	e.observe(got, true)
	e.setCannotLead("")
	e.metrics.handoffsAccepted.Inc()
	e.startTerm(got, sent)
}

// handOff writes l (our ended term's Lease, a fresh copy) held by a
// successor; ok false: no successor is announced, or no token can be
// issued: release instead.
func (e *Elector) handOff(ctx context.Context, l *coordinationv1.Lease, wait time.Duration) (got *coordinationv1.Lease, to string, ok bool, err error) {
	s := &e.st
	if !e.cfg.DirectHandoff {
		return nil, "", false, nil
	}
	succ, found := successor(l, e.cfg.Identity)
	next := max(s.maxSeen, transitionsOf(l)) + 1
	if !found || next > math.MaxInt32 {
		return nil, "", false, nil
	}
	h := l.DeepCopy()
	// As the successor's own acquisition would be written, with the term's
	// lease duration.
	h.Spec = acquireSpec(&l.Spec, succ.Identity, cmp.Or(durationOf(l), e.cfg.LeaseDuration), next, e.clock.Now())
	markHandoff(h, succ, s.incarnation, transitionsOf(l), wait)
	delete(h.Annotations, candidateKey(e.cfg.Identity)) // we are out until holdOff
	e.addLabels(h)
	got, err = e.leases.Update(ctx, h, metav1.UpdateOptions{})
	return got, succ.Identity, true, err
}
