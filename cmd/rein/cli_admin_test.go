package main

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServeAdminListen: rein serve --admin-listen serves /metrics, with a
// run started through the server counted, /healthz and /readyz; and
// /debug/pprof/ only with --pprof.
func TestServeAdminListen(t *testing.T) {
	admin := freeAddr(t)
	addr := serveInProcess(t, newDB(t), "--tools", "fixture:"+example("invoice", "tools.json"), "--admin-listen", admin)
	cli(t, "run", example("invoice", "task.json"), "--model", "script:"+example("invoice", "model.jsonl"), "--server", addr).mustExit(t, exitOK)
	code, text := httpGet(t, "http://"+admin+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	mustContain(t, "/metrics", text, `rein_runs_ended_total{status="completed"} 1`, `rein_steps_total 4`,
		`grpc_server_handled_total{grpc_code="OK",grpc_method="StartRun"`, "rein_build_info{", "go_goroutines")
	if code, _ := httpGet(t, "http://"+admin+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz: %d", code)
	}
	if code, _ := httpGet(t, "http://"+admin+"/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("/debug/pprof/ without --pprof: %d, want 404", code)
	}

	admin = freeAddr(t)
	serveInProcess(t, newDB(t), "--admin-listen", admin, "--pprof")
	if code, body := httpGet(t, "http://"+admin+"/debug/pprof/"); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("/debug/pprof/ with --pprof: %d", code)
	}
}

// The twins: --pprof without an address to serve it on is a usage error,
// and an --admin-listen address already taken stops serve before it opens
// the store (exit 5, naming the flag).
func TestServeAdminListenRefused(t *testing.T) {
	db := newDB(t)
	r := cli(t, "serve", "--db", db, "--listen", "127.0.0.1:0", "--pprof").mustExit(t, exitUsage)
	mustContain(t, "serve --pprof", r.stderr, "--admin-listen")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	r = cli(t, "serve", "--db", db, "--listen", "127.0.0.1:0", "--admin-listen", taken.Addr().String()).mustExit(t, exitUnavailable)
	mustContain(t, "serve on a taken admin port", r.stderr, "--admin-listen "+taken.Addr().String())
	mustNotExist(t, db)
}
