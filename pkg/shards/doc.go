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
//     only candidate (an election.Elector with OwnLease: found absent at
//     start, it is created at once), renews it every retry period and
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
//     that term, the wait of rule 3 is over, and for a lease duration (less
//     the margin) after the send of its last read or write that found the
//     Lease as it knows it (confirm.go: one list of the set's shard Leases
//     per retry period confirms them all). Nothing else tells a holder, in
//     bounded time, that its shard's Lease was deleted or edited by hand.
//     Never a count below one it saw on that Lease (put back lower, edited):
//     it takes such a shard again, above every count seen, once any owed
//     validity is over. Status records, per shard, the validity it handed
//     out; Peek reads without handing out.
//  2. Only the holder moves a held shard to another live member (a
//     rebalance, its app's release, its own leaving): it stops serving the
//     shard first, then writes the Lease (a compare-and-swap on the version
//     it holds) naming the receiver's current session term, with the token
//     + 1 and a MoveRecord: who gave it, its token, and WaitMs, the validity
//     its app still held for that shard, or that a move before still owes
//     (it is carried on).
//  3. The receiver serves the moved shard WaitMs after it sees the move
//     (plus the clock skew margin when WaitMs > 0), if it saw the move
//     replace the giver's version (same UID, the giver as holder at the
//     recorded token). A version that names its term and that it did not
//     see written that way (a relist, a hand edit) is waited out for a
//     lease duration. Its own writes (a take, below) it serves at once.
//  4. Any other member takes a shard (a compare-and-swap, token + 1 over
//     every count it has seen, naming its own session term) only when the
//     term the shard names is over on its own clock, and after the wait a
//     move recorded on it still owes:
//     - it saw that session Lease unrenewed for a lease duration, and then
//     ended the term itself with a compare-and-swap on that very version
//     (the holder cleared, EndedAnnotation naming the term): the holder's
//     last renew is then the version it waited on, so the holder's
//     validity, measured from that renew's send, has run out (the margin
//     covers clock rates, as in the election); or it saw another member's
//     end write replace that term (same argument);
//     - or it saw the session Lease leave that term in any other way (a
//     new term, released, deleted, recreated, replaced by hand): then it
//     waits a lease duration from that sight, as the election waits for a
//     Lease it did not see released;
//     - a term it has not seen (its watch may lag behind the shard it
//     read) is settled by a fresh read of the session Lease first: either
//     the term is there (and judged as above), or it was over before the
//     read, which starts the lease duration's wait.
//     A free shard Lease is taken after the wait its MoveRecord names when
//     seen replacing its holder's version (the last member left), else
//     after a lease duration. A shard Lease recreated (a new UID) is taken
//     no earlier than a lease duration after it was seen: versions nobody
//     saw may owe a validity.
//  5. A deleted shard Lease is put back at once by every member that saw
//     it (as last seen, the count 1000 above after a deletion found by a
//     relist or a failed write; no new term), and by its holder for itself
//     with a new token; others recreate it a lease duration after they saw
//     the deletion, which is after its holder's last confirmation (rule 1).
//     One never seen is created a lease duration after the member's latest
//     list (three when other shards of the set exist: then it was deleted,
//     and members that saw it put it back first). A member that never saw a
//     deleted shard, and creates it before any member that saw it puts it
//     back, starts its tokens over at 1: the one case in which a shard's
//     token values repeat (the simulator declares it a reset, as the
//     election's does when a Lease and everyone who saw it are gone).
//  6. A session term is ended (rule 4) only by a member that needs one of
//     its shards, never by this layer for its own session; the first live
//     member deletes session Leases no shard names that were not written
//     for three lease durations.
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
