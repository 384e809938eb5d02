// Package etcd is rein's event store on an etcd cluster (go.etcd.io/etcd
// client v3): every run, its log and its snapshot under one key prefix, so
// that several rein servers can share one set of runs. It implements
// store.Store and passes the conformance suite (storetest).
//
// Layout, under the prefix P given to Open (which ends in "/"). Numbers in
// keys are fixed-width lower-case hex, so keys sort in numeric order and a
// prefix range reads them in order:
//
//	P meta/layout           "rein-etcd-2": marks the prefix as rein's. Open
//	                        refuses a prefix without it that holds any key,
//	                        and a layout it does not know, writing nothing.
//	                        "rein-etcd-1", written before runs kept their
//	                        blobs under P rblob/, is read and marked
//	                        "rein-etcd-2" at Open, so that a build that
//	                        knows only the first refuses the prefix rather
//	                        than miss the blobs it cannot see.
//	                        "rein-etcd-3": put by the finalization to store
//	                        format 7 or later (format.go), which the builds
//	                        from before store formats refuse.
//	P meta/format           the store format a finalization made active
//	                        (decimal, internal/storeformat); absent: never
//	                        finalized, storeformat.Base (format.go)
//	P meta/changes          the cursor of the last status change (decimal);
//	                        absent before the first one
//	P run/<run id>          the run's snapshot (a Run without its contract);
//	                        its ModRevision is the run's version for the
//	                        compare-and-put
//	P contract/<run id>     the run's TaskContract, written once at create
//	P lease/<run id>        uint64 epoch (big-endian) + owner: the fence
//	P event/<run id>/<seq>  one Event per key, seq as 16 hex digits
//	P newest/<inverted id>  empty: the listing index, newest run first
//	P status/<nn>/<inverted id>  empty: the listing index by status (nn is
//	                        the RunStatus number, 2 decimal digits)
//	P request/<tenant>/<request id>  → run id (idempotent create); both
//	                        parts path-escaped, so neither holds a "/"
//	P change/<cursor>       tenant \x00 RunChange: every status change,
//	                        cursor 1, 2, 3, … gap-free in commit order
//	P rblob/<run id>/<sha-256 hex>  a blob the run brought: its size and
//	                        chunk count (8 + 4 bytes, big-endian); a blob
//	                        of at most ChunkBytes has count 0 and its
//	                        content after them, one key. Each run keeps its
//	                        own copy, so that P rblob/<run id>/ (the "/"
//	                        ends the ID: run_1/ does not begin run_10/) is
//	                        that run's blobs and no other's, deleted with it
//	P rblob/<run id>/<sha-256 hex>/<i>  chunk i (4 hex digits) of a larger
//	                        blob: at most ChunkBytes each, so no single
//	                        value nears etcd's request limit
//	P blob/<sha-256 hex>[/<i>]  a blob as an older rein kept it, once for
//	                        every run, in the same form: no longer written,
//	                        still read when the run holds no blob of that
//	                        hash, never deleted (lifecycle.go)
//	P replica/<name>        who holds the replica name (path-escaped): its
//	                        storeformat.Advert (JSON; a line of text from a
//	                        build before it), put
//	                        attached to that replica's etcd lease, so the
//	                        name is free again when the lease ends
//	                        (ClaimName): one live replica per name
//	P owner/<run id>        the replica that drives the run, put attached
//	                        to that replica's etcd lease (owner.go)
//	P unowned/<run id>      empty: a live run no replica took yet, put at
//	                        create, deleted when a replica takes it or it
//	                        ends (owner.go)
//	P held/<name>/<run id>  empty: a run the replica name (path-escaped)
//	                        took last, moved when another takes it, deleted
//	                        when it ends; not leased, so it outlives its
//	                        replica, whose runs are found by it (owner.go)
//	P webhook/<tenant>/<name>  a webhook subscription, sealed, its secrets
//	                        included; both parts path-escaped (webhooks.go)
//	P webhook-rev/<tenant>  empty: put again by every write of the tenant's
//	                        subscriptions, deleted with the last of them;
//	                        its ModRevision versions the set, and every
//	                        append that matches it, and every erasure,
//	                        compares it (webhooks.go)
//	P outbox/<tenant>/<name>/<run id>/<seq>  a delivery the subscription
//	                        must still send (a sealed WebhookDelivery), seq
//	                        as 16 hex digits; put by the Txn of the append
//	                        whose event causes it, so committed iff that
//	                        event is; deleted by the sender, with its
//	                        subscription, or with its run (outbox.go)
//	P leader/<name>/<lease>  the etcd election of name (client/v3
//	                        concurrency): the oldest key, attached to its
//	                        Store's session lease, leads (lead.go); the
//	                        webhook sender is "webhook-sender"
//	P ended/<end>/<run id>  the runs that ended, in the order they did;
//	P meta/ended, P meta/deletions, P deletions/<newest>, P deleted/<run
//	                        id>: the lifecycle's keys, written out in
//	                        lifecycle.go
//	P output/<run id>/<writer>/<call>/<seq>, P output-wanted/<run id>/
//	                        <replica>/<random>: model output relayed
//	                        between replicas, under their leases (Relay)
//	P lock/<name>/<lease>   the locks the replicas share (Locks)
//	P rate/<name>           a rate bucket the replicas share (RateCells)
//
// The Store is the event store; its satellites are types of their own over
// the one etcd client (conn.go), which the Store embeds, so that a Store
// is each of them too: the Follower (follower.go) watches what the other
// servers commit, and owns no key; the Relay (relay.go) carries the model
// output of calls in flight; the Locks (locks.go) and the RateCells
// (ratecells.go) are the replicas' shared locks and rate buckets. Each
// owns its keys above, and no other code writes them.
//
// Run IDs sort by creation time, and List wants the newest first; etcd
// reads a range in ascending key order only (a descending sort makes the
// server read the whole range), so the listing indexes key a run by its ID
// inverted: each byte b as 0xff-b, closed by 0xff (keys.go), which sorts the
// newest run first. A run ID holding "/" or NUL is refused at create.
//
// Rules this package keeps:
//   - Every write is one etcd transaction (Txn), all of it or none of it.
//     Append reads the run's snapshot, lease and contract (or takes them
//     from the cache of its own last write), validates the events by folding
//     them onto that state (runstate.ApplyAll), the state it returns once
//     they are stored, then puts the events, the new snapshot, the
//     blobs, the status index and the change record in a Txn whose compares
//     are the snapshot's ModRevision (the version), the lease key's
//     ModRevision (when fenced or acquiring) and the change cursor's (when
//     the status changes). A Txn whose compares fail writes nothing; its Else
//     branch returns the current snapshot, lease and cursor, so the append is
//     classified (ErrConflict, ErrFenced) or, when only the cursor or a
//     cached value moved, validated again and retried, the way Kubernetes'
//     GuaranteedUpdate does. Two writers at one version: one wins, the other
//     gets ErrConflict, never a forked history.
//   - With Options.Outbox set, a create, import or append also puts the
//     webhook deliveries its events cause (P outbox/), matched against the
//     tenant's subscriptions as this Store last read them, and compares the
//     tenant's P webhook-rev key at the revision they were read at: a
//     subscription written meanwhile, by any server, fails the Txn, which
//     is matched again. A delivery is committed iff its event is.
//   - Group commit (batch.go): appends that change no status (a run's
//     steps, with their blobs) share Txns. The first one queued sends the
//     appends of distinct runs queued at that moment (which put no key in
//     common: each puts its own run's blobs) as one Txn holding
//     every append's compares, at most two batches in flight, no timer; a
//     failed compare stores none of the batch, and each append is sent
//     again alone, with its Else branch. etcd shares fsyncs among pipelined
//     Txns but applies each Txn on its own, so a Txn per append is bound by
//     that per-Txn cost; the batch is not. Appends that change a status
//     share the change cursor: within one Store they take changesMu so
//     they do not retry against each other; across servers the cursor's
//     compare orders them.
//   - A request is checked against etcd's limits before anything is sent: a
//     blob over MaxBlobBytes, or a Txn over MaxRequestBytes, is refused with
//     an error wrapping store.ErrInvalidBlob (when blobs are in it) and
//     nothing is written. More operations than MaxTxnOps are sent as nested
//     Txns inside the one Txn; etcd gives a nested Txn what its parent
//     leaves of --max-txn-ops, so up to (MaxTxnOps/2)² puts fit (4096 at
//     etcd's default), and a write over that is refused up front.
//   - Blobs are put only by the Txn of the append (or import) that brings
//     them, under that run, and deleted only with the run, by the Txn of
//     Archive or Delete (lifecycle.go). A blob of one key (at most
//     ChunkBytes) is a plain put: its key is the run's and its content's
//     hash, so a second put writes the same value. A chunked blob is put in
//     a nested Txn only if its header is absent, so never rewritten. A blob
//     over 64 KiB is looked up first and not sent again when the run
//     stored it; a smaller one is sent without the look-up, which would
//     cost every step a round trip (blob.go). Reading one reassembles the
//     chunks and checks the size, the count and the SHA-256: a mismatch is
//     store.ErrDataLoss.
//   - A deleted run's ID is not used again: Create and Import compare its
//     deletion record absent (P deleted/<run id>) in their Txn, and refuse
//     it with store.ErrExists.
//   - Events, snapshots and contracts are sealed (seal.go): 0x00, a version
//     byte, the CRC-32C of the protobuf encoding, then the encoding, as the
//     bolt store seals them. etcd checks its own pages and members; the seal
//     catches what it cannot (a value written by something else under the
//     prefix). A value whose seal does not match, that does not decode, or
//     that is not the event its key says is store.ErrDataLoss naming the run
//     and the sequence.
//   - Every request to etcd is bounded by Options.Timeout. etcd unreachable,
//     without a leader, or timing a request out itself (a quorum lost) is
//     an error wrapping store.ErrUnavailable that names etcd; a write etcd
//     refused for its quota (--quota-backend-bytes, the NOSPACE alarm) is
//     one wrapping store.ErrNoSpace that says what frees it (quota.go),
//     and nothing of it was stored. A write that timed out may or may not have been committed
//     (etcd applies a Txn whole or not at all): the caller reloads the run to
//     learn which. A write is sent with a context the caller's cancellation
//     does not cut, so a cancelled caller does not leave an unknown outcome.
//   - Nothing reads at a past revision but the watches, which read
//     everything again when etcd has compacted the revision they need
//     (follower.go, relay.go); so CompactHistory may compact the cluster's
//     history from any server at any time, and rein serve does, keeping
//     the last period of it, lest old revisions fill etcd's quota
//     (quota.go).
//   - Close waits for the calls in flight. The Store does not own the etcd
//     client: whoever made it closes it.
package etcd
