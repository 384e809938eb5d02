package powerloss_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/reinhq/rein/client"
	"github.com/reinhq/rein/tests/internal/lossyfs"
)

// cutPoint is where one generation loses its power, and what of the
// unsynced state the cut keeps.
type cutPoint struct {
	what string
	// at is the operation the power is cut at; nil: once the runs ended.
	at func(op lossyfs.Op) bool
	// keep is what the cut keeps of the unsynced state; nil: a torn cut
	// drawn from the case's seed.
	keep lossyfs.Policy
}

// powerCase is one test case: a workload, and the cut of each generation
// but the last, which is started to check the store and finish the runs.
type powerCase struct {
	name string
	w    workload
	cuts []cutPoint
}

// The operations cut at.

func nthSync(n int) func(lossyfs.Op) bool {
	return func(op lossyfs.Op) bool { return op.Kind == lossyfs.Sync && op.N == n }
}

// logWriteAfterCheckpoint is the first record written after a checkpoint,
// over the records it made obsolete: at the log's start, in a file longer
// than its header.
func logWriteAfterCheckpoint(op lossyfs.Op) bool {
	return op.Kind == lossyfs.Write && op.Name == walName && op.Off == walHeaderLen && op.Size > walHeaderLen
}

// logHeader is the write of the log's header, when the log is created.
func logHeader(op lossyfs.Op) bool {
	return op.Kind == lossyfs.Write && op.Name == walName && op.Off == 0
}

// logCreate is the log's file created.
func logCreate(op lossyfs.Op) bool { return op.Kind == lossyfs.Create && op.Name == walName }

// scrubRename is a scrub's rename of its copy over the store's file.
func scrubRename(op lossyfs.Op) bool { return op.Kind == lossyfs.Rename && op.Name == dbName }

// walHeaderLen is the log's header: "rein-wal" and the store's ID.
const walHeaderLen = 16

// keepAll keeps every unsynced change: a SIGKILL with no power lost.
type keepAll struct{}

func (keepAll) File(_ string, u []lossyfs.Change) (int, int) { return len(u), 0 }
func (keepAll) Dir(u []lossyfs.DirChange) int                { return len(u) }

// tornHeader keeps every directory change and, of the log, what came
// before its header's write and half the header: a log created, its
// header torn. Other files lose what was not synced.
type tornHeader struct{}

func (tornHeader) File(name string, u []lossyfs.Change) (int, int) {
	if name != walName {
		return 0, 0
	}
	for i, c := range u {
		if !c.Truncate && c.Off == 0 && c.Len == walHeaderLen {
			return i, walHeaderLen / 2
		}
	}
	return 0, 0
}
func (tornHeader) Dir(u []lossyfs.DirChange) int { return len(u) }

// dirKept keeps every directory change and no unsynced write: the
// directory's journal reached the disk, the files' data did not.
type dirKept struct{}

func (dirKept) File(string, []lossyfs.Change) (int, int) { return 0, 0 }
func (dirKept) Dir(u []lossyfs.DirChange) int            { return len(u) }

// small is the short cases' workload: four runs of eight steps, some
// 70 syncs uncut.
var small = workload{runs: 4, steps: 8, delay: 20 * time.Millisecond}

// shortCases are the cut points the normal test command runs.
func shortCases() []powerCase {
	drop := lossyfs.Drop{}
	return []powerCase{
		{name: "sync-5", w: small, cuts: []cutPoint{{what: "the 5th sync", at: nthSync(5), keep: drop}}},
		{name: "sync-20-torn", w: small, cuts: []cutPoint{{what: "the 20th sync", at: nthSync(20)}}},
		{name: "sync-40", w: small, cuts: []cutPoint{{what: "the 40th sync", at: nthSync(40), keep: drop}}},
		{
			name: "log-write-after-checkpoint-torn",
			// Records for over two seconds: a checkpoint comes while the
			// runs go on.
			w:    workload{runs: 3, steps: 12, delay: 250 * time.Millisecond},
			cuts: []cutPoint{{what: "the first log write after a checkpoint", at: logWriteAfterCheckpoint}},
		},
		{
			name: "log-creation-dropped", w: small,
			cuts: []cutPoint{{what: "the log's header write at its creation", at: logHeader, keep: drop}},
		},
		{
			name: "log-creation-create-kept", w: small,
			cuts: []cutPoint{{what: "the log's create, reaching the disk before its header", at: logCreate, keep: dirKept{}}},
		},
		{
			name: "log-creation-torn-header", w: small,
			cuts: []cutPoint{{what: "the log's header write at its creation, half of it kept", at: logHeader, keep: tornHeader{}}},
		},
		{
			name: "log-recreation-dropped", w: small,
			cuts: []cutPoint{
				{what: "the 15th sync, unsynced writes kept (a SIGKILL)", at: nthSync(15), keep: keepAll{}},
				{what: "the log's header write as recovery makes it again", at: logHeader, keep: drop},
			},
		},
		{
			name: "log-recreation-torn-header", w: small,
			cuts: []cutPoint{
				{what: "the 15th sync, unsynced writes kept (a SIGKILL)", at: nthSync(15), keep: keepAll{}},
				{what: "the log's header write as recovery makes it again, half of it kept", at: logHeader, keep: tornHeader{}},
			},
		},
		{
			name: "recovery", w: small,
			cuts: []cutPoint{
				{what: "the 25th sync", at: nthSync(25), keep: drop},
				{what: "the next server's first sync (recovery)", at: nthSync(1), keep: drop},
			},
		},
		{
			name: "recovery-torn", w: small,
			cuts: []cutPoint{
				{what: "the 25th sync, torn", at: nthSync(25)},
				{what: "the next server's third sync (recovery), torn", at: nthSync(3)},
			},
		},
		{
			name: "scrub-rename", w: workload{runs: 3, steps: 4, delay: 20 * time.Millisecond, erase: true},
			cuts: []cutPoint{{what: "a scrub's rename of its copy over the store", at: scrubRename, keep: drop}},
		},
		{
			name: "scrub-rename-kept", w: workload{runs: 3, steps: 4, delay: 20 * time.Millisecond, erase: true},
			cuts: []cutPoint{{what: "a scrub's rename of its copy over the store, the rename reaching the disk", at: scrubRename, keep: dirKept{}}},
		},
	}
}

// TestPowerLoss cuts the power at each short case's points and checks that
// nothing acknowledged was lost, that `rein check` passes what each cut
// left, and that every run resumed to its end.
func TestPowerLoss(t *testing.T) {
	requireFUSE(t)
	for _, c := range shortCases() {
		t.Run(c.name, func(t *testing.T) { runCase(t, c) })
	}
}

// TestPowerLossSweep (-powerloss.long) cuts at every sync the workload
// makes, dropping and tearing what was not synced, and at each of the
// first syncs of a recovery. The syncs of the uncut workload's clean stop
// never come in a generation that is cut: those cases skip.
func TestPowerLossSweep(t *testing.T) {
	requireFUSE(t)
	if !long() {
		t.Skip("skipped: the sweep runs with -powerloss.long or REIN_POWERLOSS_LONG=1")
	}
	syncs := countSyncs(t, small)
	t.Logf("the workload made %d syncs uncut", syncs)
	for n := 1; n <= syncs; n++ {
		for _, mode := range []string{"dropped", "torn"} {
			var keep lossyfs.Policy // torn
			if mode == "dropped" {
				keep = lossyfs.Drop{}
			}
			c := powerCase{name: fmt.Sprintf("sync-%d-%s", n, mode), w: small,
				cuts: []cutPoint{{what: fmt.Sprintf("the %dth sync", n), at: nthSync(n), keep: keep}}}
			t.Run(c.name, func(t *testing.T) { runCase(t, c) })
		}
	}
	for n := 1; n <= 8; n++ {
		c := powerCase{name: fmt.Sprintf("recovery-sync-%d", n), w: small, cuts: []cutPoint{
			{what: "the 25th sync", at: nthSync(25), keep: lossyfs.Drop{}},
			{what: fmt.Sprintf("the next server's %dth sync", n), at: nthSync(n)},
		}}
		t.Run(c.name, func(t *testing.T) { runCase(t, c) })
	}
}

// countSyncs is how many syncs the workload makes with no cut, to its
// clean stop.
func countSyncs(t *testing.T, w workload) int {
	m := newMachine(t)
	runs := newRuns(w)
	m.finish(runs, w)
	return m.disk.Count(lossyfs.Sync)
}

// runCase runs one case: each cut's generation, then the last.
func runCase(t *testing.T, c powerCase) {
	m := newMachine(t)
	runs := newRuns(c.w)
	seed := *seedFlag ^ nameHash(c.name)
	rng := rand.New(rand.NewPCG(seed, 0x706f776572))
	t.Logf("seed %d (torn cuts draw from it; -powerloss.seed=%d moves every case's)", seed, *seedFlag)
	for i, cut := range c.cuts {
		keep := cut.keep
		if keep == nil {
			keep = lossyfs.Tear{Rand: rng}
		}
		if err := m.generation(runs, c.w, cut, keep); err != nil {
			if errors.Is(err, errNeverCut) && long() {
				t.Skipf("%v (the workload's syncs vary from run to run)", err)
			}
			t.Fatalf("cut %d (%s): %v", i+1, cut.what, err)
		}
		m.checkAfterCut(cut.what, runs)
	}
	m.finish(runs, c.w)
}

// checkAfterCut runs rein check on what a cut left. A store whose name
// was never synced is no store: that is fine only while the server had
// acknowledged nothing.
func (m *machine) checkAfterCut(what string, runs []*driven) {
	m.t.Helper()
	code, out := m.check()
	if code == 3 && !m.onDisk(dbName) {
		if starts, events := acknowledged(runs); starts+events > 0 {
			m.t.Fatalf("after the cut at %s, the store's file is gone, with %d starts and %d events acknowledged", what, starts, events)
		}
		m.t.Logf("after the cut at %s, the store's file is gone (its name was never synced); nothing was acknowledged", what)
		return
	}
	if code != 0 {
		m.t.Errorf("after the cut at %s, rein check --db exits %d, want 0:\n%s", what, code, out)
	}
}

// nameHash spreads the cases' seeds.
func nameHash(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return h.Sum64()
}

// generation starts a server, drives the runs until the power is cut at
// the cut point, and cuts it.
func (m *machine) generation(runs []*driven, w workload, cut cutPoint, keep lossyfs.Policy) error {
	t := m.t
	var cutAt <-chan lossyfs.Op
	if cut.at != nil {
		cutAt = m.disk.CutWhen(cut.at)
	}
	s := m.start()
	served := make(chan error, 1)
	go func() { served <- m.waitServing(s) }()
	var (
		op      *lossyfs.Op
		ds      *drivers
		waiting = true // for served
	)
	select {
	case o := <-cutAt:
		op = &o
	case err := <-served:
		waiting = false
		if err != nil {
			return fmt.Errorf("generation %d: %w", s.gen, err)
		}
		if err := m.served(s); err != nil {
			return err
		}
		ds = driveAll(context.Background(), m.client(), w, runs)
		select {
		case o := <-cutAt:
			op = &o
		case <-ds.done:
		}
	}
	starts, events := acknowledged(runs)
	if op != nil {
		t.Logf("generation %d: the power is cut at %v, with %d starts and %d events acknowledged so far", s.gen, *op, starts, events)
	} else if cut.at != nil {
		syncs := m.disk.Count(lossyfs.Sync)
		m.powerCut(lossyfs.Drop{})
		if ds != nil {
			ds.stop()
		}
		return fmt.Errorf("%w: generation %d's runs ended, with %d syncs, before %s", errNeverCut, s.gen, syncs, cut.what)
	}
	m.powerCut(keep)
	if ds != nil {
		ds.stop()
	}
	if waiting {
		<-served // the process is gone: it answers
	}
	return nil
}

// served records the address the first generation serves on, and checks
// that the later ones serve on it too.
func (m *machine) served(s *server) error {
	if m.addr == "" {
		m.addr = s.addr
		return nil
	}
	if s.addr != m.addr {
		return fmt.Errorf("generation %d serves on %s, want %s", s.gen, s.addr, m.addr)
	}
	return nil
}

// client is the machine's client, made once its address is known.
func (m *machine) client() *client.Client {
	if m.cl == nil {
		m.cl = m.dial()
	}
	return m.cl
}

// finish starts the last generation, drives every run to its end, checks
// what the server holds against every acknowledged commit, stops it
// cleanly and checks the store.
func (m *machine) finish(runs []*driven, w workload) {
	t := m.t
	t.Helper()
	s := m.start()
	if err := m.waitServing(s); err != nil {
		if errors.Is(err, errExited) {
			err = fmt.Errorf("%w (%v)", err, s.state)
		}
		t.Fatalf("after the last cut, rein serve does not serve: %v\n%s", err, m.log.tail(15))
	}
	if err := m.served(s); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ds := driveAll(ctx, m.client(), w, runs)
	<-ds.done
	if ctx.Err() != nil {
		t.Errorf("the runs did not all end within 90s of the last start")
	}
	problems := verify(ctx, m.client(), runs)
	starts, events := acknowledged(runs)
	t.Logf("%d runs: %d starts and %d events acknowledged across %d generations", len(runs), starts, events, m.gens)
	for _, p := range problems[:min(len(problems), 12)] {
		t.Error(p)
	}
	if len(problems) > 12 {
		t.Errorf("… %d problems in all", len(problems))
	}
	m.stop(s)
	if code, out := m.check(); code != 0 {
		t.Errorf("after the last server stopped, rein check --db exits %d, want 0:\n%s", code, out)
	}
}

// TestLyingDiskIsCaught is the twin that shows the harness can fail: once
// the disk's syncs lie (they answer without making anything durable), a
// power cut loses commits the server acknowledged, and verify says so.
func TestLyingDiskIsCaught(t *testing.T) {
	m := newMachine(t)
	w := small
	runs := newRuns(w)
	s := m.start()
	if err := m.waitServing(s); err != nil {
		t.Fatal(err)
	}
	if err := m.served(s); err != nil {
		t.Fatal(err)
	}
	ds := driveAll(context.Background(), m.client(), w, runs)
	// Honest until the store and its log exist and some runs were
	// acknowledged, then lying.
	deadline := time.Now().Add(30 * time.Second)
	for m.disk.Count(lossyfs.Sync) < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("the disk saw %d syncs in 30s", m.disk.Count(lossyfs.Sync))
		}
		select {
		case <-ds.done:
			t.Fatalf("the runs ended after %d syncs", m.disk.Count(lossyfs.Sync))
		case <-time.After(2 * time.Millisecond):
		}
	}
	m.disk.Lie(true)
	<-ds.done
	starts, events := acknowledged(runs)
	t.Logf("%d syncs (%d of them lies), %d starts and %d events acknowledged", m.disk.Count(lossyfs.Sync), m.disk.Count(lossyfs.Sync)-10, starts, events)
	m.powerCut(lossyfs.Drop{})
	code, out := m.check()
	t.Logf("rein check --db on what the lying disk kept: exit %d\n%s", code, strings.TrimSpace(out))

	s = m.start()
	if err := m.waitServing(s); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	problems := verify(ctx, m.client(), runs)
	if !mentionsLoss(problems) {
		t.Fatalf("after a power cut on a disk whose syncs lied, verify found no acknowledged commit lost (%d problems: %q)", len(problems), problems)
	}
	t.Logf("verify, as it should, found %d problems; the first: %s", len(problems), problems[0])
	m.stop(s)
}
