package etcd

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/storeformat"
)

// The prefix's store format (internal/storeformat). P meta/format holds
// the active format in decimal once a finalization persisted it; a prefix
// without it was never finalized and is in storeformat.Base. Every live
// replica advertises its build's formats in its name key, P replica/<name>
// (storeformat.Advert); a finalization puts P meta/format only if neither
// it nor any name key changed since it read them (FinalizeFormat), so a
// replica that joins meanwhile is counted, or sees the new format and
// refuses to start.

func (k keys) format() string { return k.p + "meta/format" }

// NameKey is one replica's name key as read.
type NameKey struct {
	// Name is the replica's name (unescaped).
	Name string
	// Value is what it put there (storeformat.ParseAdvert reads it).
	Value []byte
	// Lease is the etcd lease the key is attached to.
	Lease clientv3.LeaseID
}

// Formats is the prefix's store format as one read saw it.
type Formats struct {
	// Active is the prefix's active format, and Finalized says P
	// meta/format holds it (else it is storeformat.Base).
	Active    storeformat.Format
	Finalized bool
	// Replicas are the live replicas' name keys, by name.
	Replicas []NameKey
	// rev is the revision read at, and formatRev P meta/format's
	// ModRevision (0: absent): FinalizeFormat's compares.
	rev, formatRev int64
}

// ReadFormats reads the prefix's active format and the live replicas'
// name keys, at one revision. A P meta/format that is not a format number
// is store.ErrDataLoss: nothing is finalized over it.
func (s *Store) ReadFormats(ctx context.Context) (Formats, error) {
	rctx, cancel := s.readCtx(ctx)
	defer cancel()
	what := "read the store format and the replicas' name keys"
	resp, err := s.cli.Txn(rctx).Then(clientv3.OpGet(s.keys.format()), clientv3.OpGet(s.keys.replicas(), clientv3.WithPrefix())).Commit()
	if err != nil {
		return Formats{}, s.etcdErr(ctx, what, err)
	}
	f := Formats{Active: storeformat.Base, rev: resp.Header.GetRevision()}
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
		n, err := strconv.Atoi(string(kvs[0].Value))
		if err != nil || n < int(storeformat.Oldest) {
			return Formats{}, fmt.Errorf("%s: %s holds %q, not a store format number: %w; put back the number a finalization wrote (rein cluster status on a server of the newest build says which)",
				what, s.keys.format(), kvs[0].Value, store.ErrDataLoss)
		}
		f.Active, f.Finalized, f.formatRev = storeformat.Format(n), true, kvs[0].ModRevision
	}
	for _, kv := range resp.Responses[1].GetResponseRange().GetKvs() {
		raw := strings.TrimPrefix(string(kv.Key), s.keys.replicas())
		name, err := url.PathUnescape(raw)
		if err != nil {
			name = raw
		}
		f.Replicas = append(f.Replicas, NameKey{Name: name, Value: kv.Value, Lease: clientv3.LeaseID(kv.Lease)})
	}
	return f, nil
}

// layoutFormat is the first store format whose finalization marks the
// prefix layoutV3: the builds from before store formats read no
// P meta/format, only the layout, so that mark is what makes them refuse a
// prefix they can no longer serve.
const layoutFormat storeformat.Format = 7

// FinalizeFormat makes to the prefix's active format, if nothing changed
// since read: P meta/format is as read, and no name key was put since (a
// replica that joined, or claimed its name again with another build). It
// reports false, writing nothing, when something did: read again and
// decide again. From layoutFormat on, the same transaction marks the
// prefix layoutV3.
func (s *Store) FinalizeFormat(ctx context.Context, read Formats, to storeformat.Format) (bool, error) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Timeout)
	defer cancel()
	ops := []clientv3.Op{clientv3.OpPut(s.keys.format(), strconv.Itoa(int(to)))}
	if to >= layoutFormat {
		ops = append(ops, clientv3.OpPut(s.keys.layout(), layoutV3))
	}
	resp, err := s.cli.Txn(wctx).
		If(clientv3.Compare(clientv3.ModRevision(s.keys.format()), "=", read.formatRev),
			clientv3.Compare(clientv3.ModRevision(s.keys.replicas()), "<", read.rev+1).WithPrefix()).
		Then(ops...).
		Commit()
	if err != nil {
		return false, s.etcdErr(ctx, fmt.Sprintf("finalize store format %d", to), err)
	}
	return resp.Succeeded, nil
}
