package server

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/hostcheck"
	"github.com/reinhq/rein/internal/metrics"
	"github.com/reinhq/rein/internal/store"
)

// adminServer is a node with metrics on st, its gRPC client over bufconn,
// and its admin endpoints over HTTP.
func adminServer(t *testing.T, st store.Store, withPprof bool) (*Node, reinv1.RunServiceClient, *httptest.Server) {
	t.Helper()
	m := metrics.New()
	node, err := Open(context.Background(), Config{Store: st, Tools: fixtures(), Metrics: m, Resume: true})
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	go func() { _ = node.GRPC.Serve(lis) }()
	cc, err := grpc.NewClient("passthrough:///test",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(node.AdminHandler(m, withPprof, hostcheck.Rule{}))
	t.Cleanup(func() {
		hs.Close()
		_ = cc.Close()
		node.Close()
	})
	return node, reinv1.NewRunServiceClient(cc), hs
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// sample is the value of one series of a Prometheus text exposition, or
// -1 when it is not there.
func sample(text, series string) float64 {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return -1
	}
	return v
}

// TestMetricsEndpoint: /metrics says what the node did, in rein's own
// metrics (read off the published events) and the gRPC server's, with no
// run ID among the labels; /healthz and /readyz answer.
func TestMetricsEndpoint(t *testing.T) {
	_, c, hs := adminServer(t, tempBolt(t), false)
	ts := &testServer{client: c}
	done := ts.start(t, "metrics-1", contract(nil, readCall("lookup"), final("done")))
	paused := ts.start(t, "metrics-2", contract(nil, ask("which one?")))
	if done.GetStatus() != reinv1.RunStatus_RUN_STATUS_COMPLETED || paused.GetStatus() != reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT {
		t.Fatalf("runs are %v and %v", done.GetStatus(), paused.GetStatus())
	}
	code, text := get(t, hs.URL+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, text)
	}
	for series, want := range map[string]float64{
		`rein_runs_started_total`:                                            2,
		`rein_runs_ended_total{status="completed"}`:                          1,
		`rein_runs{status="running"}`:                                        0,
		`rein_runs{status="needs_input"}`:                                    1,
		`rein_steps_total`:                                                   3,
		`rein_model_calls_total{model="",provider="script"}`:                 3,
		`rein_model_tokens_total{model="",provider="script",type="input"}`:   30,
		`rein_tool_calls_total{outcome="ok",tool="lookup"}`:                  1,
		`rein_tool_call_duration_seconds_count{tool="lookup"}`:               1,
		`rein_model_call_duration_seconds_count{model="",provider="script"}`: 3,
		`grpc_server_handled_total{grpc_code="OK",grpc_method="StartRun",grpc_service="rein.v1.RunService",grpc_type="unary"}`: 2,
	} {
		if got := sample(text, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	// start's watch of the paused run is still open (the completed run's
	// may not have finished leaving yet).
	if got := sample(text, `rein_watch_streams{kind="run"}`); got < 1 || got > 2 {
		t.Errorf(`rein_watch_streams{kind="run"} = %v, want the paused run's watch counted`, got)
	}
	if sample(text, `rein_store_append_events_count`) < 4 {
		t.Errorf("rein_store_append_events_count = %v, want every append counted", sample(text, `rein_store_append_events_count`))
	}
	if !strings.Contains(text, "rein_build_info{") {
		t.Error("no rein_build_info")
	}
	for _, id := range []string{done.GetRunId(), paused.GetRunId()} {
		if strings.Contains(text, id) {
			t.Errorf("a run ID (%s) is a label value", id)
		}
	}
	if code, body := get(t, hs.URL+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %s", code, body)
	}
	if code, body := get(t, hs.URL+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz: %d %s", code, body)
	}
	if code, _ := get(t, hs.URL+"/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("/debug/pprof/ without pprof: %d, want 404", code)
	}
}

// The twins: a node that is shutting down is not ready (503, saying why),
// and a failed call is counted with its code.
func TestReadyzWhenShuttingDown(t *testing.T) {
	node, c, hs := adminServer(t, tempBolt(t), true)
	if _, err := c.GetRun(context.Background(), &reinv1.GetRunRequest{RunId: "run_missing"}); err == nil {
		t.Fatal("GetRun of a missing run succeeded")
	}
	_, text := get(t, hs.URL+"/metrics")
	if got := sample(text, `grpc_server_handled_total{grpc_code="NotFound",grpc_method="GetRun",grpc_service="rein.v1.RunService",grpc_type="unary"}`); got != 1 {
		t.Errorf("NotFound GetRun counted %v times, want 1", got)
	}
	if code, _ := get(t, hs.URL+"/debug/pprof/"); code != http.StatusOK {
		t.Errorf("/debug/pprof/ with pprof: %d", code)
	}
	node.Close()
	code, body := get(t, hs.URL+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "shutting down") {
		t.Errorf("/readyz after shutdown: %d %q, want 503 saying it is shutting down", code, body)
	}
}

// A node started on a store that already holds paused runs counts them:
// the gauges start from what is stored, not from 0.
func TestMetricsSeededFromStore(t *testing.T) {
	path := t.TempDir() + "/rein.db"
	first, c, hs := adminServer(t, boltAt(t, path), false)
	ts := &testServer{client: c}
	ts.start(t, "seed-1", contract(nil, ask("one?")))
	ts.start(t, "seed-2", contract(nil, ask("two?")))
	_, text := get(t, hs.URL+"/metrics")
	if got := sample(text, `rein_runs{status="needs_input"}`); got != 2 {
		t.Fatalf("first node: needs_input = %v, want 2", got)
	}
	first.Close()

	_, _, hs = adminServer(t, boltAt(t, path), false)
	_, text = get(t, hs.URL+"/metrics")
	if got := sample(text, `rein_runs{status="needs_input"}`); got != 2 {
		t.Errorf("restarted node: needs_input = %v, want the 2 stored", got)
	}
	if got := sample(text, `rein_runs_started_total`); got != 0 {
		t.Errorf("restarted node: runs started = %v, want 0 (counters count what this process did)", got)
	}
}

// TestReadyNeedsTheLease: a replica that holds no etcd lease is not ready
// (503, saying why); once it holds one, it is. A replica's lease metrics
// read what the replica reports at each scrape.
func TestReadyNeedsTheLease(t *testing.T) {
	var held atomic.Bool
	m := metrics.New()
	node, err := Open(context.Background(), Config{Store: tempBolt(t), Metrics: m, Leased: held.Load})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	m.TrackLeases(func() int { return 3 }, held.Load)
	hs := httptest.NewServer(node.AdminHandler(m, false, hostcheck.Rule{}))
	defer hs.Close()
	if code, body := get(t, hs.URL+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "etcd lease") {
		t.Fatalf("/readyz without the lease = %d %q, want 503 naming the lease", code, body)
	}
	if _, body := get(t, hs.URL+"/metrics"); !strings.Contains(body, "rein_replica_lease_held 0") || !strings.Contains(body, "rein_leases_held 3") {
		t.Fatalf("/metrics without the lease lacks rein_replica_lease_held 0 or rein_leases_held 3:\n%s", body)
	}
	held.Store(true)
	if code, body := get(t, hs.URL+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz with the lease = %d %q, want 200", code, body)
	}
	m.TookOver()
	m.LostLease()
	if _, body := get(t, hs.URL+"/metrics"); !strings.Contains(body, "rein_replica_lease_held 1") ||
		!strings.Contains(body, "rein_takeovers_total 1") || !strings.Contains(body, "rein_lease_losses_total 1") {
		t.Fatalf("/metrics with the lease, a takeover and a loss:\n%s", body)
	}
}

// TestAdminRefusesForeignHosts: DNS rebinding on the admin port. A page on
// a name rebound to this machine, or a request with a Host no browser
// sends, reads no metric and no profile: 403, naming the Host and the flag
// that allows a name. The twins: the listen address, localhost, [::1] and
// an allowed name pass, from the port's own origin.
func TestAdminRefusesForeignHosts(t *testing.T) {
	m := metrics.New()
	node, err := Open(context.Background(), Config{Store: tempBolt(t), Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	site, err := hostcheck.New(hostcheck.Options{Hosts: []string{"rein-1.internal"}, HostFlag: "--admin-host"})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(node.AdminHandler(m, true, site))
	defer hs.Close()
	addr := hs.Listener.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	paths := []string{"/metrics", "/debug/pprof/", "/debug/pprof/goroutine?debug=2", "/healthz", "/readyz"}
	for _, h := range []map[string]string{
		{"Host": "evil.example:" + port},
		{"Host": "evil.example:" + port, "Origin": "http://evil.example:" + port},
		{"Host": "127.0.0.1:" + port + ".evil.example"},
		{"Host": "localhost:" + port + ".evil.example"},
		{"Host": "127.0.0.1:0"},
		{"Host": "127.0.0.1:65536"},
		{"Host": "127.0.0.1:x"},
		{"Host": "127.0.0.1:"},
		{"Origin": "http://evil.example:" + port},
	} {
		for _, path := range paths {
			code, body := getWith(t, hs.URL+path, h)
			if code != http.StatusForbidden || strings.Contains(body, "rein_") || strings.Contains(body, "goroutine") {
				t.Errorf("%s with %v: %d %.80q; want 403", path, h, code, body)
			}
			if host, ok := h["Host"]; ok && (!strings.Contains(body, `"`+host+`"`) || !strings.Contains(body, "rein serve --admin-host")) {
				t.Errorf("%s with %v: %.200q; want the Host and the flag named", path, h, body)
			} else if !ok && !strings.Contains(body, `"`+h["Origin"]+`"`) {
				t.Errorf("%s with %v: %.200q; want the Origin named", path, h, body)
			}
		}
	}
	// The absolute form names the server, and Go would take it for Host.
	for _, path := range paths {
		code, body := rawRequest(t, addr, "GET http://"+addr+path+" HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n")
		if code != http.StatusForbidden || !strings.Contains(body, "not a path") {
			t.Errorf("GET http://%s%s with Host evil.example: %d %.80q; want 403", addr, path, code, body)
		}
	}

	for _, h := range []map[string]string{
		{},
		{"Host": "localhost:" + port},
		{"Host": "[::1]:" + port},
		{"Host": "rein-1.internal:" + port},
		{"Origin": "http://" + addr},
	} {
		for _, path := range paths {
			if code, body := getWith(t, hs.URL+path, h); code != http.StatusOK {
				t.Errorf("%s with %v: %d %.80q; want 200", path, h, code, body)
			}
		}
	}
	if code, body := rawRequest(t, addr, "GET /metrics HTTP/1.1\r\nHost: "+addr+"\r\nConnection: close\r\n\r\n"); code != http.StatusOK || !strings.Contains(body, "go_goroutines") {
		t.Errorf("GET /metrics in origin form: %d %.80q; want 200", code, body)
	}
}

// getWith GETs url with headers (Host among them).
func getWith(t *testing.T, url string, headers map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// rawRequest sends request, bytes as they are, to addr and returns the
// response's status and body.
func rawRequest(t *testing.T, addr, request string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
