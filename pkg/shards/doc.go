// Package shards runs a shard set: N partitions of work, each with its own
// Lease and fencing token, spread over the members (the sidecars of the
// set) in fair shares, with no controller. It is a layer over the
// single-Lease election (package election), which it uses unchanged for
// each member's session; nothing in election's decide knows about shards.
//
// # The Leases
//
// A set NAME with N shards is N shard Leases NAME-0 … NAME-(N-1) and one
// session Lease per member, NAME-member-<identity> (MemberLeaseName). All
// carry SetLabel=NAME, so one watch per member (a label selector) sees the
// whole set.
//
//   - A member's session Lease is an ordinary election: the member is its
//     only candidate (an election.Elector), renews it every retry period and
//     holds a term on it, with a validity on its own clock as any leader.
//     That is the only Lease written in steady state: about one write per
//     member per retry period, whatever N is.
//   - A shard Lease names its holder (holderIdentity), its token
//     (leaseTransitions) and the holder's session term (SessionAnnotation:
//     the session Lease, its UID and term). It is written only when the
//     shard changes hands, and never renewed: the holder's token is valid
//     while that session term is, and no longer than its validity.
//
// # The rules
//
//  1. A member serves shard i's token only while its own session term is
//     valid (election.Status.IsLeader), the shard's Lease as last seen names
//     that term, and the wait of rule 3 is over. Status hands out no
//     validity beyond the session's.
//  2. Only the holder moves a held shard to another live member (a
//     rebalance, its app's release, its own leaving): it stops serving the
//     shard first, then writes the Lease (a compare-and-swap on the version
//     it holds) naming the receiver's current session term, with the token
//     + 1 and a MoveRecord: who gave it, its token, and WaitMs, the validity
//     its app still held for that shard (recorded by Status, per shard).
//  3. The receiver serves the moved shard WaitMs after it sees the move
//     (plus the clock skew margin when WaitMs > 0), if it saw the move
//     replace the giver's version (same UID, the giver as holder at the
//     recorded token). A version that names its term and that it did not
//     see written that way (a relist, a hand edit) is waited out for a
//     lease duration. Its own writes (a take, below) it serves at once.
//  4. Any other member takes a shard (a compare-and-swap, token + 1 over
//     every count it has seen, naming its own session term) only when the
//     term the shard names is over on its own clock:
//     - it saw that session Lease unrenewed for a lease duration, and then
//     ended the term itself with a compare-and-swap on that version (the
//     holder cleared, EndedAnnotation naming the term): the holder's last
//     renew is then the version it waited on, so the holder's validity,
//     measured from that renew's send, has run out (the margin covers
//     clock rates, as in the election); or it saw another member's end
//     write replace that very version (same argument);
//     - or it saw the session Lease leave that term in any other way (a
//     new term, released, deleted, recreated, replaced by hand) or never
//     saw that term at all: then it waits a lease duration from the first
//     such sight, as the election waits for a Lease it did not see
//     released.
//     A free shard Lease is taken after the wait its MoveRecord names when
//     seen replacing its holder's version (the last member left), else
//     after a lease duration; one that does not exist is created at once
//     when never seen, a lease duration after its deletion was seen, and
//     with the count one above every count seen (1000 above after a
//     deletion found by a relist, as the election does).
//  5. A session term is ended (rule 4) only by a member that needs one of
//     its shards; a member's own session is never written by this layer
//     while it is its own term.
//
// Why it is safe: a token of shard i is served only inside its holder's
// session term (rule 1). The Lease passes to another member either by the
// holder's own write, after it stopped serving, with the receiver waiting
// out the validity the giver's app still held (rules 2, 3), or once the
// holder's term is over on the taker's clock (rule 4), which is the
// election's own argument for taking an expired Lease. Every write is a
// compare-and-swap with the token one above the count it replaces, so each
// token value is issued once per shard Lease and never goes backwards.
//
// # Fair shares
//
// plan (plan.go) is pure: from the live members (session terms that are
// valid, not leaving) and who holds what, it computes for every shard
// that must move (held by a member above its share, held by no live
// member, or free) the member that gets it. Members holding the most keep
// the ⌈N/M⌉ shares (fewest moves); those above their share give their
// highest shards; the shards to place go, by index, to the members below
// their share, by identity. Every member computes the same plan from the
// same view and carries out its own part: gives (rule 2) and takes
// (rule 4). A member that leaves (shutdown, unhealthy app) gives all its
// shards with MoveRecord.Leaving, so no one plans a shard for it while
// that session term lasts, then releases its session and deletes its
// session Lease.
package shards
