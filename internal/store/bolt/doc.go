// Package bolt is rein's embedded event store on bbolt: one file and its
// write-ahead log beside it (FILE-wal, wal.go), every append durable
// (fdatasync of the log) before it is acknowledged.
//
// Layout (all keys big-endian where they are numbers, so they sort in order):
//
//	meta/store-id          8 random bytes, which the store's log names
//	meta/wal-applied       uint64: the last log record the file holds
//	meta/format            "rein-store-4" (or "rein-store-1", from before
//	                       blobs were kept in a run's log, "rein-store-2",
//	                       from before their keys were short, or
//	                       "rein-store-3", from before store format 7: a
//	                       build that writes format 7 marks the file 4 when
//	                       it opens it, which an older rein refuses to open):
//	                       marks a file as rein's
//	meta/store_format      the store format (internal/storeformat) the file
//	                       was last written with, in decimal; none: format 6
//	                       (format.go)
//	contracts/<run id>     the run's TaskContract, written once at create
//	                       (apart from the run's bucket, so that rewriting the
//	                       snapshot never rewrites a large contract)
//	runs/<run id>/snapshot the run's state (a Run without its contract)
//	runs/<run id>/lease    uint64 epoch + owner: appends with an older epoch
//	                       are refused in the transaction (fencing)
//	runs/<run id>/events/  nested bucket: uint64 sequence → Event; and
//	                       uint64 sequence + uvarint place → SHA-256 (32
//	                       bytes) + content, a blob of at most 16 KiB, under
//	                       the sequence of the first event of the append that
//	                       brought it and its place among that append's blobs
//	                       in hash order, so it sorts right after that event:
//	                       a step's blobs share the pages of its events
//	                       (blobs.go); readers of the log pass over every key
//	                       that is not 8 bytes. A rein-store-2 file keyed a
//	                       blob by sequence + SHA-256 (40 bytes), its content
//	                       the value: still read
//	runs/<run id>/blobs/   nested bucket, the same keys → a larger blob (made
//	                       with the run's first one)
//	requests/<tenant>\x00<request id> → run id (idempotent create)
//	status/<status byte><run id> → empty (the listing index by status)
//	changes/<uint64 cursor> → tenant \x00 RunChange (every status change, in
//	                         commit order, for WatchRuns)
//	blobs/<sha-256 hex>    a blob's content, in files written before blobs
//	                       were kept with their runs: still read (Blobs looks
//	                       here for a hash its run does not hold), never
//	                       written; Open adds the bucket to a file from a
//	                       rein that had none
//
// Run IDs sort by creation time, so the runs bucket is the listing order.
//
// Events, snapshots and contracts are sealed (checksum.go): 0x00, a version
// byte, the CRC-32C of the protobuf encoding, then the encoding. A value
// without the leading 0x00 was written before values were sealed and is
// read unchecked (no protobuf encoding of a message starts with 0x00).
//
// Rules this package keeps (from bbolt's own docs):
//   - bbolt stays inside this package; callers see protos and runstate.State.
//   - Transactions are short. Bytes read in a transaction are copied (or
//     unmarshalled, which copies) before it ends; no nested transactions.
//   - Every write goes through one writer goroutine that gathers the appends
//     waiting at that moment into one batch (group commit): appends from
//     many runs share one sync, and no append waits on a timer. The batch
//     is put in a bbolt write transaction the writer keeps open, what it
//     wrote appended to the log (every write of an append goes through
//     wtx, which records it: writes.go), and acknowledged once the log is
//     synced: one fdatasync, where
//     a bbolt commit makes two. The transaction is committed (a checkpoint)
//     every two seconds of records, before the log passes 16 MiB, before a
//     lifecycle change, a scrub and the close (checkpoint.go). Reads never
//     go through it, nor wait for the writer: a read is a bbolt read
//     transaction of the last checkpoint under an immutable overlay of
//     every commit synced since (etcd's txReadBuffer), which the writer
//     publishes after each sync and swaps, with the read transaction's
//     checkpoint, at each checkpoint (snapshot.go, overlay.go, rtx.go): a
//     read sees every acknowledged write and nothing that is not yet
//     durable. Each read begins and ends its own read transaction, so
//     that none is held across a checkpoint's remap of the file; at most
//     GOMAXPROCS-1 run at once, leaving the writer a core. Open
//     puts the writes a crash left in the log again, blind, in one
//     checkpoint, and a read-only open applies them to a private copy
//     (recover.go). The writer
//     is what every run waits on, so what need not be in its transaction is
//     done by the caller's goroutine before the request is queued: the
//     events' encoding, the blobs' hashes, and the fold and the snapshot's
//     encoding onto the run's state as the writer last cached it
//     (states.go). The writer takes that fold only when the state it was
//     made on is still the run's; otherwise it folds the events itself.
//     Either way the state that fold made is what Append returns: the
//     engine does not fold an append itself, so its events are folded once
//     on their way to the file (twice when the fold ahead was overtaken).
//   - A request that fails validation writes nothing; a request is validated
//     completely before its first Put, so a batch never holds half a request.
//     Its blobs too: their hashes are checked by the caller's goroutine
//     before the request is queued, and they are put only after the
//     request's events are accepted.
//   - A file that is not a healthy rein store is refused at Open, before
//     anything writes to it: it is first opened read-only and checked (its
//     free list read too). Opening a healthy store writes nothing, and a
//     commit whose every request was refused is rolled back, not
//     committed empty: a refused request changes no byte of the file.
//   - Damage is contained, never a crash. Every read of the mapped file
//     (each View, the writer's Update, the opens) runs under guard:
//     debug.SetPanicOnFault(true) on that goroutine and a deferred recover,
//     so a fault (a damaged page pointing outside the mapping) or a bbolt
//     panic on a damaged page is an error wrapping store.ErrDataLoss for
//     what was read, and bbolt rolls the transaction back. A value whose
//     seal does not match, that does not decode, or that is not the event
//     its key says (a gap, another sequence, another run) is ErrDataLoss
//     naming the run and the sequence. A run whose key is gone but whose
//     contract is stored is ErrDataLoss, not "not found". bbolt's own
//     Tx.Check runs on a goroutine of its own, which no guard covers: Check
//     runs it only after a guarded walk read every page.
//   - Options.ReadOnly opens with bbolt's ReadOnly (a shared lock; no byte
//     written, not even bbolt's header pages); every write is refused with
//     store.ErrReadOnly before it reaches the writer.
//   - A log write that fails with ENOSPC is store.ErrDiskFull: nothing of
//     it was stored and nothing was acknowledged; the log is cut back
//     before the failed record (that cut synced), and the transaction is
//     rolled back and made again from the log's records since the last
//     checkpoint. A failure that leaves what is on disk unknown (a sync of
//     the log, a bbolt commit, the log's cut) halts the store
//     (haltLocked): every write and read from then on is
//     store.ErrUnavailable naming it, Failed is closed, and the next Open
//     applies the log. Open makes the log, and fails when it cannot: the
//     store never commits without it. A log damaged in its middle is
//     store.ErrDataLoss, kept aside as FILE-wal.broken-TIME (recover.go).
//     docs/storage.md has the table of what each failure does.
//
// Ceiling (ceiling.go) is the raw bbolt work this layout's appends and scans
// come down to, with none of the store's logic; rein-bench compares the
// store against it, and nothing else uses it.
package bolt
