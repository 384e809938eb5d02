package replica_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"

	"github.com/reinhq/rein/internal/replica"
	etcdstore "github.com/reinhq/rein/internal/store/etcd"
	"github.com/reinhq/rein/internal/storeformat"
)

// newer is a build one format past this one that still writes this one:
// what a rolling upgrade brings in. older is this build, the one it
// replaces (and the one a downgrade goes back to). previous is the build
// this one replaced: it writes the format before this build's newest only.
var (
	newer    = storeformat.Build{Reads: storeformat.Range{Min: storeformat.Oldest, Max: storeformat.Current + 1}, Writes: storeformat.Range{Min: storeformat.Current, Max: storeformat.Current + 1}}
	older    = storeformat.This()
	previous = storeformat.Build{Reads: storeformat.Range{Min: storeformat.Oldest, Max: storeformat.Current - 1}, Writes: storeformat.Range{Min: storeformat.Current - 1, Max: storeformat.Current - 1}}
)

// joinBuild joins a replica named name on prefix as a binary of build b,
// finalizing after after (0: on request only).
func joinBuild(t *testing.T, prefix, name string, b storeformat.Build, after time.Duration) (*replica.Replica, *etcdstore.Store, error) {
	t.Helper()
	st, err := etcdstore.Open(t.Context(), shared, prefix, etcdstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := replica.Join(t.Context(), replica.Config{Client: shared, Store: st, Name: name, TTL: ttl, Formats: b, Build: "rein " + name, FinalizeAfter: after})
	if err != nil {
		_ = st.Close()
		return nil, nil, err
	}
	t.Cleanup(func() {
		rep.Leave(context.Background())
		_ = st.Close()
	})
	return rep, st, nil
}

func mustJoin(t *testing.T, prefix, name string, b storeformat.Build, after time.Duration) *replica.Replica {
	t.Helper()
	rep, _, err := joinBuild(t, prefix, name, b, after)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestAdvertisement: each replica's name key holds its build and formats,
// and Status lists every live replica with them, a key of a build from
// before advertisements as Base.
func TestAdvertisement(t *testing.T) {
	prefix := "/format-" + t.Name() + "/"
	a := mustJoin(t, prefix, "a", older, 0)
	mustJoin(t, prefix, "b", previous, 0)
	v, _ := nameKey(t, prefix, "a")
	adv, legacy, err := storeformat.ParseAdvert([]byte(v))
	if err != nil || legacy || adv.Formats != older || adv.Build != "rein a" || adv.Leased.IsZero() {
		t.Fatalf("a's name key: %q: %+v %v %v", v, adv, legacy, err)
	}
	g, err := shared.Grant(t.Context(), 30)
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Revoke(context.Background(), g.ID)
	if _, err := shared.Put(t.Context(), prefix+"replica/old", "host h, pid 1, joined 2026-12-01T00:00:00Z", clientv3.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}
	st, err := a.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.Backend != "etcd" || st.Active != storeformat.Base || st.Finalized || st.Target != storeformat.Base || st.Pending || len(st.Replicas) != 3 {
		t.Fatalf("status: %+v", st)
	}
	for _, r := range st.Replicas {
		switch {
		case r.Name == "a" && (!r.Self || r.Formats != older || r.RunsDriven != 0),
			r.Name == "b" && (r.Self || r.Formats != previous),
			r.Name == "old" && (!r.Legacy || r.Formats.Writes.Max != storeformat.Base || r.Err != ""):
			t.Fatalf("replica %+v", r)
		}
	}
}

// TestFinalizeManual: with every replica on the newer build a
// finalization is pending and stays so (no --finalize-after) until
// Finalize, which makes the newer format active and turns its features
// on; an older build then refuses to join, naming both formats. Its twin:
// before, the older build joins (a downgrade works).
func TestFinalizeManual(t *testing.T) {
	prefix := "/format-" + t.Name() + "/"
	finalizedAt(t, prefix, storeformat.Current)
	a, ast, err := joinBuild(t, prefix, "a", newer, 0)
	if err != nil {
		t.Fatal(err)
	}
	mustJoin(t, prefix, "b", newer, 0)
	started := &reinv1.Event{RunId: "run-1", Sequence: 1, RecordedAt: timestamppb.Now(), Actor: "principal:alice",
		Payload: &reinv1.Event_RunStarted{RunStarted: &reinv1.RunStarted{Contract: &reinv1.TaskContract{Goal: "g"}, Principal: "alice", Tenant: "acme", RequestId: "r1"}}}
	if _, _, err := ast.Create(t.Context(), started); err != nil {
		t.Fatal(err)
	}
	if a.Gate().Allows("next", storeformat.Current+1) {
		t.Fatal("a feature of the newer format is on before finalization")
	}
	st, err := a.Status(t.Context())
	if err != nil || !st.Pending || st.Target != storeformat.Current+1 || st.Active != storeformat.Current {
		t.Fatalf("status: %+v %v", st, err)
	}
	// Before finalization, the older build still joins, and the newer
	// format is no longer pending while it runs.
	down, dst, err := joinBuild(t, prefix, "down", older, 0)
	if err != nil {
		t.Fatalf("a downgrade before finalization was refused: %v", err)
	}
	if run, err := dst.Load(t.Context(), "run-1"); err != nil || run.Contract.GetGoal() != "g" {
		t.Fatalf("the older build reads the run the newer one wrote: %+v %v", run, err)
	}
	if from, to, err := a.Finalize(t.Context()); err != nil || from != to || to != storeformat.Current {
		t.Fatalf("Finalize with an older replica live: %d -> %d, %v; want nothing done", from, to, err)
	}
	down.Leave(t.Context())
	from, to, err := a.Finalize(t.Context())
	if err != nil || from != storeformat.Current || to != storeformat.Current+1 {
		t.Fatalf("Finalize: %d -> %d, %v", from, to, err)
	}
	if !a.Gate().Allows("next", storeformat.Current+1) {
		t.Fatal("a feature of the finalized format is still off")
	}
	if f := readFormat(t, prefix); f != strconv.Itoa(int(storeformat.Current+1)) {
		t.Fatalf("meta/format = %q", f)
	}
	if l := readKey(t, prefix+"meta/layout"); l != "rein-etcd-3" {
		t.Fatalf("meta/layout after a finalization past format 7 = %q", l)
	}
	_, _, err = joinBuild(t, prefix, "late", older, 0)
	if !errors.Is(err, storeformat.ErrIncompatible) || !strings.Contains(err.Error(), fmt.Sprintf("format %d", storeformat.Current+1)) || !strings.Contains(err.Error(), fmt.Sprintf("up to %d", storeformat.Current)) {
		t.Fatalf("an older build after finalization: %v", err)
	}
	if v, _ := nameKey(t, prefix, "late"); v != "" {
		t.Fatalf("the refused build left its name key: %q", v)
	}
}

// TestFinalizeAutomatic: once every live replica writes the newer format
// for --finalize-after, one of them finalizes it, and the others' gates
// follow. Its twin: with an older replica live, nothing is finalized.
func TestFinalizeAutomatic(t *testing.T) {
	after := 300 * time.Millisecond
	prefix := "/format-" + t.Name() + "/"
	finalizedAt(t, prefix, storeformat.Current)
	a := mustJoin(t, prefix, "a", newer, after)
	old := mustJoin(t, prefix, "old", older, after)
	b := mustJoin(t, prefix, "b", newer, after)
	// With the older replica live nothing is pending, so the loop has
	// nothing to finalize.
	if st, err := a.Status(t.Context()); err != nil || st.Pending || st.Target != storeformat.Current {
		t.Fatalf("status with an older replica live: %+v %v", st, err)
	}
	old.Leave(t.Context())
	// The gates say nothing when they move: read them on a tick, under a
	// deadline.
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !b.Gate().Allows("next", storeformat.Current+1) || !a.Gate().Allows("next", storeformat.Current+1) {
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("not finalized within 10s: meta/format %q", readFormat(t, prefix))
		}
	}
	if f := readFormat(t, prefix); f != strconv.Itoa(int(storeformat.Current+1)) {
		t.Fatalf("meta/format = %q", f)
	}
}

// TestFinalizeRefusesAnUnbelievedReplica: a live name key that does not
// decode, or claims formats no build has, is left out of the count, shown
// with its error, and blocks a finalization, which writes nothing.
func TestFinalizeRefusesAnUnbelievedReplica(t *testing.T) {
	for i, bad := range []string{`{"formats":{"reads":{"min":1`, `{"formats":{"reads":{"min":1,"max":99999999},"writes":{"min":6,"max":99999999}}}`} {
		prefix := "/format-" + t.Name() + "-" + string(rune('a'+i)) + "/"
		finalizedAt(t, prefix, storeformat.Current)
		a := mustJoin(t, prefix, "a", newer, 0)
		g, err := shared.Grant(t.Context(), 30)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := shared.Put(t.Context(), prefix+"replica/liar", bad, clientv3.WithLease(g.ID)); err != nil {
			t.Fatal(err)
		}
		st, err := a.Status(t.Context())
		if err != nil || st.Target != storeformat.Current+1 || st.Blocked == "" {
			t.Fatalf("status with %q: %+v %v", bad, st, err)
		}
		if _, _, err := a.Finalize(t.Context()); !errors.Is(err, storeformat.ErrNotFinalizable) || !strings.Contains(err.Error(), `"liar"`) {
			t.Fatalf("Finalize with %q: %v", bad, err)
		}
		if f := readFormat(t, prefix); f != strconv.Itoa(int(storeformat.Current)) {
			t.Fatalf("finalized to %q", f)
		}
		// Its twin: once the key is gone, the finalization goes through.
		if _, err := shared.Revoke(t.Context(), g.ID); err != nil {
			t.Fatal(err)
		}
		if _, to, err := a.Finalize(t.Context()); err != nil || to != storeformat.Current+1 {
			t.Fatalf("Finalize once the liar left: %d %v", to, err)
		}
	}
}

// TestJoinRefusesAGarbledFormat: a P meta/format that is not a number is
// refused at join, and nothing is written over it.
func TestJoinRefusesAGarbledFormat(t *testing.T) {
	prefix := "/format-" + t.Name() + "/"
	mustJoin(t, prefix, "a", older, 0).Leave(t.Context())
	if _, err := shared.Put(t.Context(), prefix+"meta/format", "seven"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := joinBuild(t, prefix, "b", newer, 0); err == nil || !strings.Contains(err.Error(), `"seven"`) {
		t.Fatalf("join on a garbled format: %v", err)
	}
	if f := readFormat(t, prefix); f != "seven" {
		t.Fatalf("meta/format = %q", f)
	}
}

// finalizedAt makes the empty prefix one a finalization left at format f:
// the start of an upgrade from this build to the newer one.
func finalizedAt(t *testing.T, prefix string, f storeformat.Format) {
	t.Helper()
	st, err := etcdstore.Open(t.Context(), shared, prefix, etcdstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	if _, err := shared.Put(t.Context(), prefix+"meta/format", strconv.Itoa(int(f))); err != nil {
		t.Fatal(err)
	}
}

func readFormat(t *testing.T, prefix string) string {
	t.Helper()
	return readKey(t, prefix+"meta/format")
}

func readKey(t *testing.T, key string) string {
	t.Helper()
	resp, err := shared.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

// TestUpgradeToThisBuild: this build joins a prefix of the build before
// it (format 6, never finalized) and writes only format 6 while a replica
// of that build is live: nothing is finalized and the layout stays
// rein-etcd-2, which that build reads. Once it is gone, the finalization
// to this build's format marks the prefix rein-etcd-3, which the builds
// from before store formats refuse, and the build before it no longer
// joins.
func TestUpgradeToThisBuild(t *testing.T) {
	prefix := "/format-" + t.Name() + "/"
	p := mustJoin(t, prefix, "p", previous, 0)
	a := mustJoin(t, prefix, "a", older, 0)
	if a.Gate().Allows("tool digests", storeformat.Current) {
		t.Fatal("a feature of this build's format is on with a replica of the build before it live")
	}
	if from, to, err := a.Finalize(t.Context()); err != nil || from != to || to != storeformat.Current-1 {
		t.Fatalf("Finalize with the build before live: %d -> %d, %v; want nothing done", from, to, err)
	}
	if l := readKey(t, prefix+"meta/layout"); l != "rein-etcd-2" {
		t.Fatalf("meta/layout before the finalization = %q", l)
	}
	p.Leave(t.Context())
	if from, to, err := a.Finalize(t.Context()); err != nil || from != storeformat.Current-1 || to != storeformat.Current {
		t.Fatalf("Finalize: %d -> %d, %v", from, to, err)
	}
	if !a.Gate().Allows("tool digests", storeformat.Current) {
		t.Fatal("a feature of the finalized format is still off")
	}
	if l := readKey(t, prefix+"meta/layout"); l != "rein-etcd-3" {
		t.Fatalf("meta/layout after the finalization = %q", l)
	}
	if _, _, err := joinBuild(t, prefix, "back", previous, 0); !errors.Is(err, storeformat.ErrIncompatible) {
		t.Fatalf("the build before, after the finalization: %v", err)
	}
	// This build opens the prefix it marked.
	mustJoin(t, prefix, "again", older, 0)
}
