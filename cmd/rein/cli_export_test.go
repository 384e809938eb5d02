package main

// Tests of `export`, `import`, and `inspect FILE` / `events FILE`: an export
// file reads as the run it came from, with no server and no database, and a
// damaged one is refused before anything is opened.

import (
	"bytes"
	"crypto/sha256"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/export"
	"github.com/reinhq/rein/internal/store"
)

// exportRun runs an example on a new store, exports the run to a file with
// `export RUN_ID` (stdout), and returns the store, the run's ID and the
// file.
func exportRun(t *testing.T, name string, exit int) (db, runID, file string) {
	t.Helper()
	db = newDB(t)
	runID = startExample(t, name, db, exit)["run_id"].(string)
	r := cli(t, "export", runID, "--db", db).mustExit(t, 0)
	if !strings.HasPrefix(r.stdout, "rein-export 1\n") {
		t.Fatalf("export wrote %.40q…, want the magic line first", r.stdout)
	}
	file = filepath.Join(t.TempDir(), name+".rein")
	if err := os.WriteFile(file, []byte(r.stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	return db, runID, file
}

// readExport reads an export file with the export package.
func readExport(t *testing.T, file string) *reinv1.RunExport {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	x, err := export.Read(f, file)
	if err != nil {
		t.Fatalf("export.Read: %v", err)
	}
	return x
}

// sameOutput fails the test unless two invocations printed the same thing.
func sameOutput(t *testing.T, what string, got, want result) {
	t.Helper()
	if got.stdout != want.stdout {
		t.Errorf("%s: stdout differs\ngot:\n%s\nwant:\n%s", what, got.stdout, want.stdout)
	}
}

func TestExportReadsAsTheStoredRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		example string
		exit    int
		status  string
	}{{"invoice", 0, "completed"}, {"refund", 10, "needs_approval"}} {
		t.Run(tc.example, func(t *testing.T) {
			t.Parallel()
			db, runID, file := exportRun(t, tc.example, tc.exit)
			// No server and no database: the file is read on its own, and
			// --db names a store that is never made.
			none := newDB(t)
			for _, args := range [][]string{
				{"inspect", "--json"},
				{"inspect"},
				{"events", "--json"},
				{"events"},
				{"events", "--json", "--after", "3"},
				{"events", "--after", "3"},
			} {
				stored := cli(t, append([]string{args[0], runID, "--db", db}, args[1:]...)...).mustExit(t, 0)
				fromFile := cli(t, append([]string{args[0], file, "--db", none}, args[1:]...)...).mustExit(t, 0)
				sameOutput(t, strings.Join(args, " ")+" FILE", fromFile, stored)
			}
			mustNotExist(t, none)
			s := decodeOne(t, cli(t, "inspect", file, "--json").mustExit(t, 0).stdout)
			if s["run_id"] != runID || s["status"] != tc.status {
				t.Errorf("inspect FILE: run %v %v, want %s %s", s["run_id"], s["status"], runID, tc.status)
			}
			// The file holds every event, exactly as stored.
			x := readExport(t, file)
			if x.GetRunId() != runID || len(x.GetEvents()) != len(events(t, db, runID)) {
				t.Errorf("the file holds run %s with %d events, want %s with %d", x.GetRunId(), len(x.GetEvents()), runID, len(events(t, db, runID)))
			}
			if x.GetExportedAt() == nil || !strings.HasPrefix(x.GetExportedBy(), "rein ") {
				t.Errorf("exported_at %v, exported_by %q: want both set", x.GetExportedAt(), x.GetExportedBy())
			}
		})
	}
}

func TestExportToFile(t *testing.T) {
	t.Parallel()
	db, runID, stdoutFile := exportRun(t, "refund", 10)
	dir := t.TempDir()
	out := filepath.Join(dir, "run.rein")
	r := cli(t, "export", runID, "-o", out, "--db", db).mustExit(t, 0)
	if r.stdout != "" {
		t.Errorf("export -o wrote %d bytes to stdout, want none", len(r.stdout))
	}
	mustContain(t, "stderr", r.stderr, out)
	info, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", info.Mode().Perm())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the directory holds %d files, want only the export (no temporary file left)", len(entries))
	}
	// The same bytes as stdout, but for the time it was written.
	fromStdout, fromFile := readExport(t, stdoutFile), readExport(t, out)
	if fromStdout.GetExportedAt() == nil || fromFile.GetExportedAt() == nil {
		t.Fatal("an export has no exported_at")
	}
	fromStdout.ExportedAt, fromFile.ExportedAt = nil, nil
	var a, b bytes.Buffer
	if err := export.Write(&a, fromStdout); err != nil {
		t.Fatal(err)
	}
	if err := export.Write(&b, fromFile); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("export -o and export to stdout wrote different runs")
	}

	// -o replaces an existing file whole.
	if err := os.WriteFile(out, bytes.Repeat([]byte("old "), 100_000), 0o644); err != nil {
		t.Fatal(err)
	}
	cli(t, "export", runID, "-o", out, "--db", db).mustExit(t, 0)
	if x := readExport(t, out); !proto.Equal(x.GetEvents()[0], fromFile.GetEvents()[0]) || len(x.GetEvents()) != len(fromFile.GetEvents()) {
		t.Error("export -o over an existing file did not replace it with the run")
	}

	// The twins: no such run, or a directory that does not exist, leave
	// nothing behind.
	missing := filepath.Join(dir, "missing.rein")
	r = cli(t, "export", "run_01NOSUCHRUN0000000000000000", "-o", missing, "--db", db).mustExit(t, 3)
	mustContain(t, "stderr", r.stderr, "not found")
	if _, err := os.Stat(missing); err == nil {
		t.Errorf("export of a missing run made %s", missing)
	}
	r = cli(t, "export", "run_01NOSUCHRUN0000000000000000", "--db", db).mustExit(t, 3)
	if r.stdout != "" {
		t.Errorf("export of a missing run wrote %q", r.stdout)
	}
	cli(t, "export", runID, "-o", filepath.Join(dir, "no", "such", "dir.rein"), "--db", db).mustExit(t, 1)
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the directory holds %d files after the refusals, want 1", len(entries))
	}
	store := newDB(t)
	cli(t, "export", runID, "--db", store).mustExit(t, 3)
	mustNotExist(t, store)
}

func TestImport(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		example string
		exit    int
		status  string
	}{{"invoice", 0, "completed"}, {"refund", 10, "needs_approval"}} {
		t.Run(tc.example, func(t *testing.T) {
			t.Parallel()
			db, runID, file := exportRun(t, tc.example, tc.exit)
			other := newDB(t)
			r := cli(t, "import", file, "--json", "--db", other).mustExit(t, 0)
			imported := decodeOne(t, r.stdout)
			want := decodeOne(t, cli(t, "inspect", runID, "--json", "--db", db).mustExit(t, 0).stdout)
			for _, k := range append(cardFields, inspectFields...) { // what inspect adds
				delete(want, k)
			}
			if !reflect.DeepEqual(imported, want) {
				t.Errorf("import printed\n%v\nwant the run's summary\n%v", imported, want)
			}
			for _, args := range [][]string{{"inspect", "--json"}, {"events", "--json"}, {"events"}} {
				src := cli(t, append([]string{args[0], runID, "--db", db}, args[1:]...)...).mustExit(t, 0)
				dst := cli(t, append([]string{args[0], runID, "--db", other}, args[1:]...)...).mustExit(t, 0)
				sameOutput(t, strings.Join(args, " ")+" of the imported run", dst, src)
			}
			// The store's indexes know the run too.
			runs := decodeListJSON(t, cli(t, "list", "--json", "--status", tc.status, "--db", other).mustExit(t, 0).stdout)
			if len(runs) != 1 || runs[0]["run_id"] != runID {
				t.Errorf("list --status %s of the other store: %v, want the imported run", tc.status, runs)
			}

			// The twin: importing again is refused, and changes nothing.
			before := len(events(t, other, runID))
			r = cli(t, "import", file, "--db", other).mustExit(t, 1)
			mustContain(t, "stderr", r.stderr, runID, "already", other)
			if r.stdout != "" {
				t.Errorf("a refused import printed %q", r.stdout)
			}
			if after := len(events(t, other, runID)); after != before {
				t.Errorf("the refused import changed the run: %d events, were %d", after, before)
			}
			// Nor can it go back into the store it came from.
			cli(t, "import", file, "--db", db).mustExit(t, 1)
		})
	}
}

// TestImportExportBlobs: the blobs an export file carries are imported with
// the events that reference them, and exported again from the store; a file
// that lacks a referenced blob is refused before the store is opened.
func TestImportExportBlobs(t *testing.T) {
	t.Parallel()
	_, runID, file := exportRun(t, "invoice", 0)
	x := readExport(t, file)
	// Over 4 MiB in all, more than one GetBlobs answer holds: the embedded
	// server takes the import whole, and export asks it for the rest.
	goal, big := []byte("the goal, as the model read it"), bytes.Repeat([]byte("a tool's long output "), 1<<17)
	big2 := bytes.Repeat([]byte("another long output "), 1<<17)
	x.Blobs = map[string][]byte{store.BlobHash(goal): goal, store.BlobHash(big): big, store.BlobHash(big2): big2}
	refs := 0
	for _, ev := range x.GetEvents() {
		if mr := ev.GetModelRequested(); mr != nil {
			mr.InputBlobs = []string{store.BlobHash(goal), store.BlobHash(big), store.BlobHash(big2)}
			refs++
		}
	}
	if refs == 0 {
		t.Fatal("the run has no model_requested event to reference the blobs")
	}
	var buf bytes.Buffer
	if err := export.Write(&buf, x); err != nil {
		t.Fatal(err)
	}
	withBlobs := writeFile(t, "blobs.rein", buf.String())
	db := newDB(t)
	cli(t, "import", withBlobs, "--db", db).mustExit(t, 0)
	again := filepath.Join(t.TempDir(), "again.rein")
	cli(t, "export", runID, "-o", again, "--db", db).mustExit(t, 0)
	if got := readExport(t, again); !reflect.DeepEqual(got.GetBlobs(), x.GetBlobs()) || len(got.GetEvents()) != len(x.GetEvents()) {
		t.Errorf("export of the imported run: %d events, %d blobs; want %d and the %d imported",
			len(got.GetEvents()), len(got.GetBlobs()), len(x.GetEvents()), len(x.GetBlobs()))
	}

	// The twin: the same file without one of the blobs.
	delete(x.Blobs, store.BlobHash(big))
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(x)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	lacking := writeFile(t, "lacking.rein", "rein-export 1\n"+string(body)+string(sum[:]))
	other := newDB(t)
	r := cli(t, "import", lacking, "--db", other).mustExit(t, 2)
	mustContain(t, "stderr", r.stderr, lacking, "references blob "+store.BlobHash(big), "does not carry")
	mustNotExist(t, other)
}

func TestDamagedExportRefused(t *testing.T) {
	t.Parallel()
	_, _, file := exportRun(t, "invoice", 0)
	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	n := len(good)
	flipped := bytes.Clone(good)
	flipped[n/2] ^= 0x01
	for _, tc := range []struct {
		name string
		data []byte
		exit int
		says string
	}{
		// The success this table is the failure twin of.
		{"intact", good, 0, ""},
		{"truncated in the middle", good[:n/2], 2, "damaged or truncated"},
		{"truncated inside the checksum", good[:n-10], 2, "damaged or truncated"},
		{"truncated inside the magic", good[:4], 2, "damaged or truncated"},
		{"a byte flipped", flipped, 2, "damaged or truncated"},
		{"empty", nil, 2, "not a rein export file"},
		{"a task file", []byte(`{"goal": "not an export"}`), 2, "not a rein export file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := writeFile(t, "run.rein", string(tc.data))
			db := newDB(t)
			for _, args := range [][]string{
				{"inspect", path},
				{"inspect", path, "--json"},
				{"events", path},
				{"events", path, "--json"},
				{"import", path},
			} {
				r := cli(t, append(args, "--db", db)...).mustExit(t, tc.exit)
				if tc.exit == 0 {
					// Each prints the run: its goal names the invoice.
					mustContain(t, strings.Join(args, " ")+": stdout", r.stdout, "INV-42")
					continue
				}
				mustContain(t, strings.Join(args, " ")+": stderr", r.stderr, path, tc.says)
				if r.stdout != "" {
					t.Errorf("%s: stdout %q, want nothing", strings.Join(args, " "), r.stdout)
				}
			}
			if tc.exit != 0 {
				// import checked the file before it opened the store.
				mustNotExist(t, db)
			}
		})
	}
}

func TestImportRefusals(t *testing.T) {
	t.Parallel()
	_, _, file := exportRun(t, "invoice", 0)

	// With --server the run goes to the server: none there is unavailable,
	// and the --db store is not made.
	db := newDB(t)
	r := cli(t, "import", file, "--server", "127.0.0.1:1", "--db", db).mustExit(t, 5)
	mustContain(t, "stderr", r.stderr, "Unavailable")
	mustNotExist(t, db)

	// A file that is not there, or a directory, is not an export.
	cli(t, "import", filepath.Join(t.TempDir(), "missing.rein"), "--db", db).mustExit(t, 2)
	cli(t, "import", t.TempDir(), "--db", db).mustExit(t, 2)
	mustNotExist(t, db)

	// A store that is not one is refused and left as it was.
	bad := writeFile(t, "rein.db", strings.Repeat("not a database ", 1000))
	r = cli(t, "import", file, "--db", bad).mustExit(t, 5)
	mustContain(t, "stderr", r.stderr, bad)
	if got, _ := os.ReadFile(bad); string(got) != strings.Repeat("not a database ", 1000) {
		t.Error("import changed a file that is not a store")
	}

	// The twin: the same file goes into a new store.
	cli(t, "import", file, "--db", db).mustExit(t, 0)
}

// TestImportKeepsTenant: the run keeps its tenant, which must be the
// caller's: on the embedded server, the local admin's ("default"). A run of
// another tenant is refused and nothing is stored.
func TestImportKeepsTenant(t *testing.T) {
	t.Parallel()
	_, runID, file := exportRun(t, "invoice", 0)
	x := readExport(t, file)
	if got := x.GetEvents()[0].GetRunStarted().GetTenant(); got != "default" {
		t.Fatalf("an embedded run's tenant is %q, want default", got)
	}
	x.GetEvents()[0].GetRunStarted().Tenant = "acme"
	var buf bytes.Buffer
	if err := export.Write(&buf, x); err != nil {
		t.Fatal(err)
	}
	acme := writeFile(t, "acme.rein", buf.String())
	db := newDB(t)
	r := cli(t, "import", acme, "--db", db).mustExit(t, 4)
	mustContain(t, "stderr", r.stderr, runID, `tenant "acme"`, "PermissionDenied")
	if r.stdout != "" {
		t.Errorf("a refused import printed %q", r.stdout)
	}
	if runs := decodeListJSON(t, cli(t, "list", "--json", "--db", db).mustExit(t, 0).stdout); len(runs) != 0 {
		t.Errorf("a refused import stored %v", runs)
	}

	// The twin: the run as exported, in the caller's tenant, is taken.
	imported := decodeOne(t, cli(t, "import", file, "--json", "--db", db).mustExit(t, 0).stdout)
	if imported["run_id"] != runID {
		t.Errorf("import printed %v, want run %s", imported, runID)
	}
}

func TestExportHelpWritesNothing(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"export", "--help"}, {"import", "--help"}} {
		db := newDB(t)
		r := cli(t, append(args, "--db", db)...).mustExit(t, 0)
		mustContain(t, "stdout", r.stdout, args[0]+" ")
		mustNotExist(t, db)
	}
	// The twin: without their argument they are usage errors.
	for _, args := range [][]string{{"export"}, {"import"}} {
		db := newDB(t)
		cli(t, append(args, "--db", db)...).mustExit(t, 2)
		mustNotExist(t, db)
	}
}
