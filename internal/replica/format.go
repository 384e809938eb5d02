package replica

import (
	"context"
	"fmt"
	"strings"
	"time"

	etcdstore "github.com/reinhq/rein/internal/store/etcd"
	"github.com/reinhq/rein/internal/storeformat"
)

// The store format (internal/storeformat, docs/upgrading.md). A replica
// advertises its build's formats in its name key, and checks, once it
// holds the name, that its build serves the prefix's active format: one
// that cannot read or write it does not join (storeformat.ErrIncompatible).
// Then it follows the active format (its Gate) and, when every live
// replica writes a newer one, counts the time that has lasted: past
// FinalizeAfter it finalizes it (Store.FinalizeFormat, which one replica
// wins). A name key that does not parse, or whose formats no build has, is
// logged and left out of the count; finalization waits until it is gone.

// pendingFormat is a finalization the format loop waits to make: to
// target, pending since since.
type pendingFormat struct {
	target storeformat.Format
	since  time.Time
}

// advert is what the replica puts in its name key.
func (r *Replica) advert() string {
	return storeformat.Advert{Card: r.card, Build: r.cfg.Build, Formats: r.cfg.Formats, Leased: time.Now().UTC()}.Encode()
}

// Gate is the store's active format as the features of this build see it.
func (r *Replica) Gate() *storeformat.Gate { return r.gate }

// checkFormat refuses to serve a prefix whose active format this build
// cannot read or write.
func (r *Replica) checkFormat(ctx context.Context) error {
	f, err := r.cfg.Store.ReadFormats(ctx)
	if err != nil {
		return err
	}
	r.gate.SetActive(f.Active)
	where := "the etcd prefix"
	if f.Finalized {
		where = "the etcd prefix, finalized,"
	}
	return r.cfg.Formats.Serves(f.Active, where)
}

// view is the prefix's formats as one read saw them.
type view struct {
	read    etcdstore.Formats
	members []storeformat.Member
	// target is what every believed replica writes; blocked says why no
	// finalization may happen now ("" when one may).
	target  storeformat.Format
	blocked string
}

// look reads the formats and the replicas' advertisements, logs those it
// does not believe, and moves the gate to the active format.
func (r *Replica) look(ctx context.Context) (view, error) {
	f, err := r.cfg.Store.ReadFormats(ctx)
	if err != nil {
		return view{}, err
	}
	v := view{read: f}
	var bad []string
	for _, k := range f.Replicas {
		m := storeformat.ReadMember(k.Name, k.Value, f.Active)
		if m.Err != nil && r.warnOnce(k.Name, m.Err.Error()) {
			r.cfg.Logger.Warn("a replica's name key is not believed: it is left out of the store format's count, and no finalization happens while it is live",
				"replica", k.Name, "lease", fmt.Sprintf("%x", int64(k.Lease)), "error", m.Err)
		}
		if m.Err != nil {
			bad = append(bad, fmt.Sprintf("%q (%v)", k.Name, m.Err))
		}
		v.members = append(v.members, m)
	}
	r.gate.SetActive(f.Active)
	if err := r.cfg.Formats.Serves(f.Active, "the etcd prefix, finalized,"); err != nil && r.warnOnce("", err.Error()) {
		// Finalized while this replica joined: it must not write.
		r.cfg.Logger.Error("this server's build cannot serve the store's active format: replace it with a newer build", "error", err)
	}
	v.target, err = storeformat.Target(v.members)
	switch {
	case len(bad) > 0:
		v.blocked = "the name keys of " + strings.Join(bad, ", ") + " are not believed: stop those servers, or delete their keys if no server runs under them"
	case err != nil:
		v.blocked = err.Error()
	}
	return v, nil
}

// warnOnce reports whether the complaint about replica name ("": this
// one's build) is new.
func (r *Replica) warnOnce(name, complaint string) bool {
	r.pmu.Lock()
	defer r.pmu.Unlock()
	if r.warned == nil {
		r.warned = map[string]string{}
	}
	if r.warned[name] == complaint {
		return false
	}
	r.warned[name] = complaint
	return true
}

// followFormat looks at the formats a few times per TTL (and per
// FinalizeAfter), until Leave.
func (r *Replica) followFormat() {
	every := r.cfg.TTL
	if a := r.cfg.FinalizeAfter; a > 0 && a/4 < every {
		every = max(a/4, 50*time.Millisecond)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
			r.lookFormat(r.ctx)
		}
	}
}

// lookFormat follows the active format, and finalizes a newer one every
// live replica has written for FinalizeAfter.
func (r *Replica) lookFormat(ctx context.Context) {
	v, err := r.look(ctx)
	if err != nil {
		r.cfg.Logger.Warn("read the store format; trying again later", "error", err)
		return
	}
	now := time.Now()
	r.pmu.Lock()
	if v.blocked != "" || v.target <= v.read.Active {
		r.pending = pendingFormat{}
		r.pmu.Unlock()
		return
	}
	if r.pending.target != v.target {
		r.pending = pendingFormat{target: v.target, since: now}
		r.cfg.Logger.Info("every live replica writes a newer store format: a finalization is pending",
			"active_format", int(v.read.Active), "target", int(v.target), "finalize_after", r.cfg.FinalizeAfter)
	}
	since := r.pending.since
	r.pmu.Unlock()
	if r.cfg.FinalizeAfter <= 0 || now.Sub(since) < r.cfg.FinalizeAfter {
		return
	}
	ok, err := r.cfg.Store.FinalizeFormat(ctx, v.read, v.target)
	if err != nil {
		r.cfg.Logger.Warn("finalize the store format; trying again later", "target", int(v.target), "error", err)
		return
	}
	if ok {
		r.finalized(v.read.Active, v.target, "every live replica wrote it for --finalize-after")
	}
}

// finalized records a finalization this replica made.
func (r *Replica) finalized(from, to storeformat.Format, why string) {
	r.gate.SetActive(to)
	r.pmu.Lock()
	r.pending = pendingFormat{}
	r.pmu.Unlock()
	r.cfg.Logger.Info("finalized the store format: a build that cannot write it no longer starts on this store",
		"from", int(from), "to", int(to), "why", why)
}

// Finalize makes the format every live replica writes the prefix's active
// one now, without waiting for FinalizeAfter (rein cluster finalize), and
// returns the formats before and after; from == to when nothing was
// pending.
func (r *Replica) Finalize(ctx context.Context) (from, to storeformat.Format, err error) {
	for range 5 {
		v, err := r.look(ctx)
		if err != nil {
			return 0, 0, err
		}
		if v.blocked != "" {
			return 0, 0, fmt.Errorf("%w: %s", storeformat.ErrNotFinalizable, v.blocked)
		}
		if v.target <= v.read.Active {
			return v.read.Active, v.read.Active, nil
		}
		ok, err := r.cfg.Store.FinalizeFormat(ctx, v.read, v.target)
		if err != nil {
			return 0, 0, err
		}
		if ok {
			r.finalized(v.read.Active, v.target, "asked for (rein cluster finalize)")
			return v.read.Active, v.target, nil
		}
	}
	return 0, 0, fmt.Errorf("%w: replicas joined or left five times while it was tried; try again", storeformat.ErrNotFinalizable)
}

// Status is the prefix's formats and live replicas, with the runs each
// holds (rein cluster status).
func (r *Replica) Status(ctx context.Context) (storeformat.Status, error) {
	v, err := r.look(ctx)
	if err != nil {
		return storeformat.Status{}, err
	}
	st := storeformat.Status{
		Backend: "etcd", Active: v.read.Active, Finalized: v.read.Finalized, Target: v.target,
		Pending: v.target > v.read.Active, FinalizeAfter: r.cfg.FinalizeAfter, Blocked: v.blocked, Off: r.gate.Off(),
	}
	r.pmu.Lock()
	if st.Pending && r.pending.target == v.target {
		st.PendingSince = r.pending.since
	}
	r.pmu.Unlock()
	for _, m := range v.members {
		rs := storeformat.ReplicaStatus{
			Name: m.Name, Build: m.Advert.Build, Card: m.Advert.Card, Legacy: m.Legacy, Formats: m.Advert.Formats,
			Leased: m.Advert.Leased, Self: m.Name == r.cfg.Name, RunsDriven: -1,
		}
		if m.Err != nil {
			rs.Err = m.Err.Error()
		}
		if n, err := r.cfg.Store.HeldCount(ctx, m.Name); err == nil {
			rs.RunsDriven = n
		}
		st.Replicas = append(st.Replicas, rs)
	}
	return st, nil
}
