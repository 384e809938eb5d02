package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/reinhq/rein/client"
	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store/bolt"
)

// acknowledged is every run the server at addr answers for and each run's
// events: all of it was acknowledged, since a read sees only what is.
func acknowledged(t *testing.T, c *client.Client) map[string][]*reinv1.Event {
	t.Helper()
	ctx := context.Background()
	out := map[string][]*reinv1.Event{}
	token := ""
	for {
		page, err := c.Runs.ListRuns(ctx, &reinv1.ListRunsRequest{PageSize: 1000, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.GetRuns() {
			evs, err := c.Runs.ListEvents(ctx, &reinv1.ListEventsRequest{RunId: r.GetRunId(), PageSize: 10000})
			if err != nil {
				t.Fatal(err)
			}
			out[r.GetRunId()] = evs.GetEvents()
		}
		if token = page.GetNextPageToken(); token == "" {
			return out
		}
	}
}

// TestBackupWhileCommitting: a backup taken over the API while runs are
// committing, restored, holds every run and every event acknowledged before
// the backup began, the same; and rein serve starts on the backup file as
// it is.
func TestBackupWhileCommitting(t *testing.T) {
	addr := serveInProcess(t, newDB(t), "--tools", "fixture:"+example("invoice", "tools.json"))
	c, err := client.Dial(addr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// Runs commit throughout: four drivers start run after run.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	completed := 0
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if r := cli(t, "run", example("invoice", "task.json"), "--model", "script:"+example("invoice", "model.jsonl"), "--server", addr, "--json"); r.code == exitOK {
					mu.Lock()
					completed++
					mu.Unlock()
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	// Some runs first, so that the backup has runs to hold.
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		n := completed
		mu.Unlock()
		if n >= 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d runs completed in 60s", n)
		}
		if _, err := c.Runs.ListRuns(context.Background(), &reinv1.ListRunsRequest{}); err != nil { // a pause that waits on the server
			t.Fatal(err)
		}
	}

	before := acknowledged(t, c)
	out := filepath.Join(t.TempDir(), "rein.backup")
	r := cli(t, "backup", "--server", addr, out).mustExit(t, exitOK)
	sum, err := os.ReadFile(out + ".sha256")
	if err != nil {
		t.Fatal(err)
	}
	hexSum := strings.Fields(string(sum))[0]
	mustContain(t, "rein backup", r.stdout, out, hexSum)
	if _, err := os.Stat(out + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("%s.tmp is left after the backup (stat: %v)", out, err)
	}

	restored := filepath.Join(t.TempDir(), "restored.db")
	cli(t, "restore", out, "--db", restored).mustExit(t, exitOK)
	st, err := bolt.Open(restored, bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	for runID, want := range before {
		got, err := st.Events(context.Background(), runID, 0, 10000)
		if err != nil {
			t.Errorf("run %s, acknowledged before the backup: %v", runID, err)
			continue
		}
		if len(got) < len(want) {
			t.Errorf("run %s: the restored store holds %d events, %d were acknowledged before the backup", runID, len(got), len(want))
			continue
		}
		for i := range want {
			if !proto.Equal(got[i], want[i]) {
				t.Errorf("run %s: restored event %d differs from the one acknowledged:\n got %v\nwant %v", runID, i+1, got[i], want[i])
				break
			}
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	t.Logf("%d runs acknowledged before the backup, all restored; %d runs completed so far", len(before), completed)
	mu.Unlock()

	// The twin of a clean restore: the same backup over a store that is
	// there is refused without --force, which replaces it.
	r = cli(t, "restore", out, "--db", restored).mustExit(t, exitError)
	mustContain(t, "restore over a store", r.stderr, "--force")
	// --force moves the old store's log aside, so the restored file never
	// takes its records for its own.
	if err := os.WriteFile(restored+"-wal", []byte("the old store's log"), 0o600); err != nil {
		t.Fatal(err)
	}
	cli(t, "restore", out, "--db", restored, "--force").mustExit(t, exitOK)
	if _, err := os.Stat(restored + "-wal"); !os.IsNotExist(err) {
		t.Errorf("the old log is still beside the restored file (stat: %v)", err)
	}
	if aside, _ := filepath.Glob(restored + "-wal.replaced-*"); len(aside) != 1 {
		t.Errorf("the old log moved aside: %v, want one FILE-wal.replaced-TIME", aside)
	}
	cli(t, "check", "--db", restored).mustExit(t, exitOK)

	// rein serve starts on the backup file itself.
	served := serveInProcess(t, out)
	var listed []map[string]any
	if err := json.Unmarshal([]byte(cli(t, "list", "--server", served, "--json", "--limit", "1000").mustExit(t, exitOK).stdout), &listed); err != nil {
		t.Fatal(err)
	}
	if got := len(listed); got < len(before) {
		t.Errorf("a server on the backup lists %d runs, want at least %d", got, len(before))
	}
}

// TestBackupDBAndDamage: rein backup --db backs up a file no server holds;
// the twins: the same file held by a rein serve is refused (exit 5, saying
// to use --server), a backup that does not match its checksum, or that
// matches one but is damaged, is refused by restore, which writes nothing,
// and an OUT in a directory that does not exist fails with nothing written.
func TestBackupDBAndDamage(t *testing.T) {
	db := newDB(t)
	cli(t, exampleRun("invoice", db)...).mustExit(t, exitOK)
	dir := t.TempDir()
	out := filepath.Join(dir, "b.db")
	cli(t, "backup", "--db", db, out).mustExit(t, exitOK)
	restored := newDB(t) // in a directory restore makes
	cli(t, "restore", out, "--db", restored).mustExit(t, exitOK)
	if got, want := cli(t, "list", "--db", restored, "--json").mustExit(t, exitOK).stdout, cli(t, "list", "--db", db, "--json").mustExit(t, exitOK).stdout; got != want {
		t.Errorf("the restored store lists\n%s\nthe store lists\n%s", got, want)
	}

	// No store at --db.
	r := cli(t, "backup", "--db", newDB(t), filepath.Join(dir, "none.db")).mustExit(t, exitNotFound)
	mustContain(t, "backup of no store", r.stderr, "no rein store")

	// OUT in a missing directory.
	missing := filepath.Join(dir, "nowhere", "b.db")
	r = cli(t, "backup", "--db", db, missing).mustExit(t, exitError)
	mustContain(t, "backup to a missing directory", r.stderr, "does not exist", filepath.Dir(missing))
	mustNotExist(t, missing)

	// A backup changed since it was written: refused by its checksum.
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	flipped := append([]byte(nil), data...)
	flipped[len(flipped)/2] ^= 0xff
	if err := os.WriteFile(out, flipped, 0o600); err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(dir, "fresh", "r.db")
	if err := os.MkdirAll(filepath.Dir(fresh), 0o700); err != nil {
		t.Fatal(err)
	}
	r = cli(t, "restore", out, "--db", fresh).mustExit(t, exitError)
	mustContain(t, "restore of a changed backup", r.stderr, "does not match its checksum")
	// A damaged one whose checksum matches (made after the damage): refused
	// by its check.
	truncated := data[:len(data)/2]
	if err := os.WriteFile(out, truncated, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := writeBackup(context.Background(), out, func(_ context.Context, w io.Writer) (int64, error) {
		n, err := w.Write(truncated)
		return int64(n), err
	}); err != nil {
		t.Fatal(err)
	}
	r = cli(t, "restore", out, "--db", fresh).mustExit(t, exitError)
	mustContain(t, "restore of a damaged backup", r.stderr, "damaged", "nothing was written")
	entries, err := os.ReadDir(filepath.Dir(fresh))
	if err != nil || len(entries) != 0 {
		t.Errorf("a refused restore left %v (%v) in its directory", entries, err)
	}

	// --db on a file a server holds.
	serveInProcess(t, db)
	r = cli(t, "backup", "--db", db, filepath.Join(dir, "held.db")).mustExit(t, exitUnavailable)
	mustContain(t, "backup --db of a held file", r.stderr, "--server", "lock")
	if _, err := os.Stat(filepath.Join(dir, "held.db")); !os.IsNotExist(err) {
		t.Errorf("a refused backup wrote held.db (stat: %v)", err)
	}
}

// TestBackupNeedsAdmin: the twin of a backup over the API: a caller
// without the admin role is refused (exit 4), and nothing is written.
func TestBackupNeedsAdmin(t *testing.T) {
	tokens := writeFile(t, "tokens.json", `{"principals": [
		{"id": "ops", "tenant": "acme", "roles": ["operator"], "token_sha256": "`+hashOf("ops-token")+`"},
		{"id": "root", "tenant": "acme", "roles": ["admin"], "token_sha256": "`+hashOf("root-token")+`"}]}`)
	addr := serveInProcess(t, newDB(t), "--tokens", tokens)
	out := filepath.Join(t.TempDir(), "b.db")
	r := cli(t, "backup", "--server", addr, "--token", "ops-token", out).mustExit(t, exitDenied)
	mustContain(t, "backup by an operator", r.stderr, "admin")
	for _, p := range []string{out, out + ".tmp", out + ".sha256"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("a refused backup left %s (stat: %v)", p, err)
		}
	}
	cli(t, "backup", "--server", addr, "--token", "root-token", out).mustExit(t, exitOK)
}
