// Package election runs one candidate of a leader election on a
// coordination.k8s.io/v1 Lease and turns each acquisition into a fencing
// token (the Lease's spec.leaseTransitions as written by the acquiring
// update).
//
// Safety rules, in short:
//   - every write is a compare-and-swap on the Lease's resourceVersion;
//   - followers watch the Lease (no polling) and judge expiry on their own
//     monotonic clock, from the moment they observed the last change;
//   - every acquisition increments leaseTransitions past the highest value
//     this process has ever seen, also when the same identity takes the Lease
//     again, so tokens never go backwards while a candidate that saw the
//     Lease is running;
//   - the token is served only from the monotonic instant the last successful
//     renew was sent until other candidates could take over, less a margin.
//
// # Layout
//
// The algorithm is apart from the storage, as in client-go's leaderelection
// and resourcelock: decide.go is a pure function from the candidate's state
// and the time to the next action; spec.go is the only code that builds a
// Lease spec; actions.go carries an action out (API calls); observe.go turns
// what the loop learns into state; informer.go queues the watch's events in
// order; elector.go is the loop (wait for an event or a timer, decide,
// execute, publish); status.go is what readers see.
//
// # States
//
// Phases (what decide sees) and the actions that move between them:
//
//	            initial list done
//	syncing ─────────────────────────┐
//	                                 ▼
//	  ┌──────────────── following ◄──────────── (Lease held by another, or by an
//	  │  waitForExpiry:  │   ▲                   earlier process with our name)
//	  │  obsTime +       │   │ observe: taken, deleted, recreated,
//	  │  leaseDuration   │   │ giveUp (renew deadline), stepDown (release)
//	  │                  ▼   │
//	  │  acquire ──────► leading ── renew (every retry period, compare-and-swap)
//	  │  (CAS, token =   │   ▲      acquire again if leaseTransitions was raised
//	  │  maxSeen + 1)    └───┘      above the token (superseded)
//	  │
//	  └─ absent (no Lease): restore the deleted Lease as last known (anyone),
//	     or create it with a new token once nobody can still hold a valid one
//	     (notBefore); the leader whose own valid term was deleted may take it
//	     back at once.
//
// Besides: refresh (GET after a lost race, authoritative), raise (a follower
// that has seen a higher leaseTransitions than the Lease shows writes it
// back, keeping the holder), and back-off after failed writes (retryAt).
//
// The record beyond the spec (record.go): each process writes its random
// incarnation with every acquire and renew, and a term is its own only if
// the Lease carries it; a release records the releasing process, its token
// and the validity its app still holds (0 when the app gave the token
// back); an operator's reset of the count is an annotation too.
//
// The safety rules decide enforces:
//   - no acquisition (create or update) before notBefore: one lease duration
//     after a deletion was observed (the longer of ours and the deleted
//     Lease's), and one lease duration after this candidate first found no
//     Lease without ever having seen one: a deleted Lease's holder may still
//     serve its token that long;
//   - a held Lease is taken only after max(our leaseDuration, its
//     leaseDurationSeconds) without a change observed on our own clock;
//   - a free Lease is taken before that only when we saw it replace the
//     term its release record names (same UID, process and count), and then
//     no earlier than the validity the record says the app still holds;
//     any other free Lease is waited out like a held one;
//   - a Lease seen with a new UID waits like a deletion; a deletion learned
//     from a relist raises the count past acquisitions we may not have seen;
//   - a token is never issued below the highest leaseTransitions seen.
//
// # Direct handoff
//
// With Config.DirectHandoff (handoff.go), candidates announce themselves on
// the Lease (one merge patch when they join or leave the election), and a
// leader that steps down writes the Lease held by the newest announced
// candidate with the next token instead of writing it free. The successor
// serves only after its own accepting write lands: a validity can only
// start when its holder sent a write, because a process knows when another
// process's write was sent only up to clock offsets and watch delays, which
// the election never assumes bounded. The rules it adds:
//   - a handoff counts as one only for a candidate that saw it replace the
//     term its record names (as a release); any other Lease carrying such
//     a record is waited out like a held one;
//   - its successor accepts no earlier than the validity the giver's app
//     still holds (plus the margin), and only if it has seen no higher
//     count; until its acceptance lands, the handoff is not its term (it
//     never renews, releases or hands it on);
//   - the other followers may take a handoff not accepted after that wait
//     and one retry period: its successor never served it, and the
//     compare-and-swap lets one of the two writes land.
package election
