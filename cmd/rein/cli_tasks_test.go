package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeTasksReload: rein serve --tasks, as a process, serves its
// catalog to rein tasks; on SIGHUP with a broken file it logs the file and
// line, keeps the previous catalog and keeps serving; on SIGHUP with the
// file fixed, rein tasks lists the new task.
func TestServeTasksReload(t *testing.T) {
	t.Setenv(cliEnv, "1") // the server is this test binary running the CLI
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	lookup := `{"name": "lookup", "description": "Look an invoice up.", "goal": "look",
  "input_schema": {"type": "object", "properties": {"invoice_id": {"type": "string"}}}}`
	if err := os.WriteFile(filepath.Join(dir, "lookup.json"), []byte(lookup), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := startGrpcurlServer(t, t.TempDir(), exe, []string{"serve", "--listen", "127.0.0.1:0", "--db", newDB(t), "--tasks", dir})
	mustContain(t, "the server's log", srv.output(), `msg="task catalog loaded" dir=`+dir+` tasks=[lookup]`)
	out := cli(t, "tasks", "--server", srv.addr).mustExit(t, 0).stdout
	mustContain(t, "rein tasks", out, "lookup", "Look an invoice up.")
	out = cli(t, "tasks", "lookup", "--server", srv.addr, "--json").mustExit(t, 0).stdout
	mustContain(t, "rein tasks lookup --json", out, `"digest":"sha256:`, `"invoice_id"`)
	cli(t, "tasks", "refund", "--server", srv.addr).mustExit(t, exitNotFound)

	refund := filepath.Join(dir, "refund.json")
	srv.rewriteAndHangUp(t, refund, "{\"name\": \"refund\",\n\"goal\": \"refund\",\n\"budgte\": {}}")
	srv.waitLog(t, "the refused reload", "keeping the previous catalog", refund, "line 3")
	mustServe(t, srv)
	if out := cli(t, "tasks", "--server", srv.addr).mustExit(t, 0).stdout; strings.Contains(out, "refund") {
		t.Errorf("a refused file joined the catalog:\n%s", out)
	}

	srv.rewriteAndHangUp(t, refund, `{"name": "refund", "description": "Refund it.", "goal": "refund"}`)
	srv.waitLog(t, "the reload", `msg="task catalog reloaded" dir=`+dir+` tasks="[lookup refund]"`)
	mustContain(t, "rein tasks", cli(t, "tasks", "--server", srv.addr).mustExit(t, 0).stdout, "refund", "Refund it.")
	srv.stop(t)
}
