package console

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// endless is a body that never ends: it counts what was read of it.
type endless struct{ read atomic.Int64 }

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	e.read.Add(int64(len(p)))
	return len(p), nil
}

// post sends a Connect unary GetServerInfo with body, of unknown length
// unless length >= 0, and returns the status and the answer's body.
func post(t *testing.T, url string, body io.Reader, length int64, headers map[string]string) (int, string) {
	t.Helper()
	return send(t, url, "GetServerInfo", body, length, connectHeaders(headers))
}

// TestCallersAreNamedBeforeTheBodyIsRead: a caller without credentials is
// refused from its headers alone; the server never waits for (or holds)
// its body, however long.
func TestCallersAreNamedBeforeTheBodyIsRead(t *testing.T) {
	srv, seen := newConsoleWith(t, Options{Authenticate: func(r *http.Request) error {
		if r.Header.Get("Authorization") != "Bearer t0k" {
			return status.Error(codes.Unauthenticated, "no such token")
		}
		return nil
	}})
	body := &endless{}
	done := make(chan struct{})
	var code int
	var answer string
	go func() {
		defer close(done)
		code, answer = post(t, srv.URL, body, -1, map[string]string{"Authorization": "Bearer wrong"})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the server waited for an endless body before refusing its caller")
	}
	if code != http.StatusUnauthorized || !strings.Contains(answer, "no such token") {
		t.Fatalf("an unknown token: %d %s; want 401 with the authenticator's message", code, answer)
	}
	if len(seen()) != 0 {
		t.Fatalf("the refused call reached the gRPC server: %v", seen())
	}
	// The twin: the right token is served.
	if code, answer := post(t, srv.URL, strings.NewReader("{}"), -1, nil); code != http.StatusOK {
		t.Fatalf("the right token: %d %s", code, answer)
	}
}

// TestBodiesAreBoundedAsRead: a body over the limit is refused, by its
// Content-Length before a byte is read, or as it is read when it has none.
func TestBodiesAreBoundedAsRead(t *testing.T) {
	const limit = 64 << 10
	srv, seen := newConsoleWith(t, Options{MaxBodyBytes: limit})
	code, answer := post(t, srv.URL, io.LimitReader(&endless{}, 256<<20), 256<<20, nil)
	if code != http.StatusTooManyRequests || !strings.Contains(answer, "resource_exhausted") || !strings.Contains(answer, "--max-msg-bytes") {
		t.Errorf("a 256 MiB Content-Length: %d %s; want resource_exhausted naming --max-msg-bytes", code, answer)
	}
	body := &endless{}
	code, answer = post(t, srv.URL, body, -1, nil)
	if code != http.StatusTooManyRequests || !strings.Contains(answer, "resource_exhausted") {
		t.Errorf("an endless chunked body: %d %s; want resource_exhausted", code, answer)
	}
	if n := body.read.Load(); n > 64<<20 {
		t.Errorf("the client sent %d bytes of an endless body before the refusal", n)
	}
	if len(seen()) != 0 {
		t.Fatalf("oversized calls reached the gRPC server: %v", seen())
	}
	// The twin: a body at the limit is served.
	exact := `{"pad":"` + strings.Repeat("x", limit-10) + `"}`
	if code, answer := post(t, srv.URL, strings.NewReader(exact), int64(len(exact)), nil); code != http.StatusOK {
		t.Fatalf("a body of %d bytes (the limit): %d %.300s", len(exact), code, answer)
	}
}

// gzipped is data compressed.
func gzipped(t *testing.T, parts ...[]byte) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	for _, p := range parts {
		if _, err := zw.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestDecompressionIsBounded: a gzip bomb, on the Connect and gRPC-Web
// paths, is refused as it inflates; a compressed call of honest size is
// served. The bombs call ImportRun, whose limit is the server's: a read's
// body is refused at its Content-Length, long before.
func TestDecompressionIsBounded(t *testing.T) {
	srv, seen := newConsoleWith(t, Options{MaxBodyBytes: 2 << 20})
	// gzip members one after another inflate as one stream: 1 GiB of
	// zeros from 1024 copies of one small member.
	member := gzipped(t, make([]byte, 1<<20))
	bomb := bytes.Repeat(member, 1024)
	gz := connectHeaders(map[string]string{"Content-Encoding": "gzip"})
	code, answer := send(t, srv.URL, "ImportRun", bytes.NewReader(bomb), int64(len(bomb)), gz)
	if code != http.StatusBadRequest || !strings.Contains(answer, "inflates more than") {
		t.Errorf("a %d-byte gzip bomb (1 GiB inflated): %d %s; want a 4xx saying it inflates too far", len(bomb), code, answer)
	}
	// Under the ratio, over the limit: about 2 MiB of random letters in,
	// 3 MiB out.
	varied := make([]byte, 3<<20)
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range varied {
		varied[i] = byte('a' + rnd.IntN(26))
	}
	big := gzipped(t, []byte(`{"pad":"`), varied, []byte(`"}`))
	code, answer = send(t, srv.URL, "ImportRun", bytes.NewReader(big), int64(len(big)), gz)
	if code != http.StatusTooManyRequests || !strings.Contains(answer, "inflates to more than") {
		t.Errorf("%d bytes inflating to 3 MiB past a 2 MiB limit: %d %s; want resource_exhausted", len(big), code, answer)
	}
	// gRPC-Web: the message's envelope says it is compressed.
	msg := bomb
	frame := append([]byte{1, 0, 0, 0, 0}, msg...)
	frame[1], frame[2], frame[3], frame[4] = byte(len(msg)>>24), byte(len(msg)>>16), byte(len(msg)>>8), byte(len(msg))
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/rein.v1.RunService/ImportRun", bytes.NewReader(frame))
	req.Header.Set("Content-Type", "application/grpc-web+proto")
	req.Header.Set("Grpc-Encoding", "gzip")
	req.Header.Set("Authorization", "Bearer t0k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Header.Get("Grpc-Status") != "3" || !strings.Contains(resp.Header.Get("Grpc-Message"), "inflates more than") {
		t.Errorf("a gRPC-Web gzip bomb: %d %q %s; want a refusal saying it inflates too far", resp.StatusCode, resp.Header, b)
	}
	if len(seen()) != 0 {
		t.Fatalf("bombs reached the gRPC server: %v", seen())
	}
	// The twin: honest compression is served.
	small := gzipped(t, []byte(`{"pad":"`+strings.Repeat("ab", 1000)+`"}`))
	if code, answer := post(t, srv.URL, bytes.NewReader(small), int64(len(small)), map[string]string{"Content-Encoding": "gzip"}); code != http.StatusOK {
		t.Fatalf("a gzipped call: %d %s", code, answer)
	}
}

// stalled is a body that sends a byte, then nothing until it is closed.
type stalled struct {
	sent   bool
	closed chan struct{}
}

func (s *stalled) Read(p []byte) (int, error) {
	if !s.sent {
		s.sent = true
		p[0] = '{'
		return 1, nil
	}
	<-s.closed
	return 0, errors.New("closed")
}

// TestSlowBodiesTimeOut: a body that stops arriving is answered
// deadline_exceeded after the read timeout, and the connection is free of
// it; a body that arrives in time is served.
func TestSlowBodiesTimeOut(t *testing.T) {
	srv, seen := newConsoleWith(t, Options{ReadTimeout: 300 * time.Millisecond})
	body := &stalled{closed: make(chan struct{})}
	defer close(body.closed)
	start := time.Now()
	done := make(chan struct{})
	var code int
	var answer string
	go func() {
		defer close(done)
		code, answer = post(t, srv.URL, body, -1, nil)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("a stalled body held its call for 20s with a read timeout of 300ms")
	}
	if code != http.StatusGatewayTimeout && !strings.Contains(answer, "deadline_exceeded") {
		t.Fatalf("a stalled body: %d %s after %s; want deadline_exceeded", code, answer, time.Since(start))
	}
	if len(seen()) != 0 {
		t.Fatalf("a stalled call reached the gRPC server: %v", seen())
	}
	if code, answer := post(t, srv.URL, strings.NewReader("{}"), -1, nil); code != http.StatusOK {
		t.Fatalf("a prompt body: %d %s", code, answer)
	}
}

// TestConnectionsPerClientAreCapped: past the cap, a client's new
// connection is closed as it is accepted; once one of its connections
// closes, it may open another.
func TestConnectionsPerClientAreCapped(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := LimitPerClient(raw, 2)
	defer lis.Close()
	served := make(chan struct{}, 16) // a connection the server closed after its client did
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() { // echo until the client closes
				_, _ = io.Copy(c, c)
				c.Close()
				served <- struct{}{}
			}()
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	alive := func(c net.Conn) bool {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("x")); err != nil {
			return false
		}
		b := make([]byte, 1)
		_, err := io.ReadFull(c, b)
		return err == nil
	}
	a, b, c := dial(), dial(), dial()
	defer a.Close()
	defer b.Close()
	defer c.Close()
	if !alive(a) || !alive(b) {
		t.Fatal("the first two connections were not served")
	}
	if alive(c) {
		t.Fatal("a third connection from one address was served past a cap of 2")
	}
	a.Close()
	select { // the server's side of a closed, and gave its slot back
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not close its side of a closed connection")
	}
	d := dial()
	defer d.Close()
	if !alive(d) {
		t.Fatal("after one of two connections closed, a new one was still refused")
	}
}

// TestEmptyBodies: an empty Connect body is the empty message in protobuf
// (the console's client sends one for GetServerInfo), and no JSON at all.
func TestEmptyBodies(t *testing.T) {
	srv, _ := newConsole(t)
	code, answer := call(t, srv.URL, "GetServerInfo", "", map[string]string{"Content-Type": "application/proto", "Connect-Protocol-Version": "1", "Authorization": "Bearer t0k"})
	if code != http.StatusOK || !strings.Contains(answer, "Bearer t0k") {
		t.Fatalf("an empty protobuf body: %d %q; want the empty message served", code, answer)
	}
	code, answer = call(t, srv.URL, "GetServerInfo", "", connectHeaders(nil))
	if code != http.StatusBadRequest || !strings.Contains(answer, "invalid_argument") || !strings.Contains(answer, "not JSON") {
		t.Fatalf("an empty JSON body: %d %s; want invalid_argument", code, answer)
	}
}

// TestRefusalsCloseUnreadConnections: a request refused before its body
// is read (no credentials, here) is answered at once and its HTTP/1
// connection closed, however slowly the body would come: the server does
// not read on to drain it. The twin: a served call keeps its connection.
func TestRefusalsCloseUnreadConnections(t *testing.T) {
	srv, _ := newConsoleWith(t, Options{Authenticate: func(r *http.Request) error {
		if r.Header.Get("Authorization") != "Bearer t0k" {
			return status.Error(codes.Unauthenticated, "no such token")
		}
		return nil
	}})
	addr := strings.TrimPrefix(srv.URL, "http://")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST /rein.v1.RunService/GetServerInfo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"+
		"Connect-Protocol-Version: 1\r\nContent-Length: 1000\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	answer, err := io.ReadAll(c) // to EOF: the server closed it
	if err != nil {
		t.Fatalf("the refused connection was not closed within 10s: %v (read %q)", err, answer)
	}
	if !strings.Contains(string(answer), "401") || !strings.Contains(string(answer), "Connection: close") {
		t.Fatalf("the refusal: %q; want 401 with Connection: close", answer)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/rein.v1.RunService/GetServerInfo", strings.NewReader("{}"))
	for k, v := range connectHeaders(nil) {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("a served call: %d, close %v; want 200 on a connection kept open", resp.StatusCode, resp.Close)
	}
}

// TestDamagedCompressionIsInvalidArgument: a body that says gzip and is
// not, and a gRPC-Web frame flagged compressed with no encoding named, are
// the caller's mistakes.
func TestDamagedCompressionIsInvalidArgument(t *testing.T) {
	srv, seen := newConsole(t)
	for _, body := range []string{"hello world", "\x1f\x8b"} {
		code, answer := post(t, srv.URL, strings.NewReader(body), int64(len(body)), map[string]string{"Content-Encoding": "gzip"})
		if code != http.StatusBadRequest || !strings.Contains(answer, "invalid_argument") {
			t.Errorf("%q as gzip: %d %s; want 400 invalid_argument", body, code, answer)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/rein.v1.RunService/GetServerInfo", bytes.NewReader([]byte{1, 0, 0, 0, 2, 'h', 'i'}))
	req.Header.Set("Content-Type", "application/grpc-web+proto")
	req.Header.Set("Authorization", "Bearer t0k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("Grpc-Status") != "3" {
		t.Errorf("a frame flagged compressed, no encoding: grpc-status %q %q; want 3", resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message"))
	}
	if len(seen()) != 0 {
		t.Fatalf("damaged calls reached the gRPC server: %v", seen())
	}
}

// TestBodiesInFlightAreBounded: while request bodies fill the server's
// budget, another request waits, then is refused resource_exhausted at
// its read timeout; once the budget frees, it is served.
func TestBodiesInFlightAreBounded(t *testing.T) {
	const limit = 64 << 10
	first := make(chan struct{})
	var once sync.Once
	// Authenticate runs just before a request takes its room: the first
	// call's tells the test it is about to hold the budget.
	srv, _ := newConsoleWith(t, Options{MaxBodyBytes: limit, MaxBodyBytesInFlight: limit + envelopeBytes, ReadTimeout: 2 * time.Second,
		Authenticate: func(*http.Request) error { once.Do(func() { close(first) }); return nil }})
	// One request of the limit's length holds the budget while its body
	// stalls.
	c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(c, "POST /rein.v1.RunService/GetServerInfo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"+
		"Connect-Protocol-Version: 1\r\nAuthorization: Bearer t0k\r\nContent-Length: %d\r\n\r\n{", limit); err != nil {
		t.Fatal(err)
	}
	<-first
	// Authenticate runs just before the stalled request takes its room: a
	// call that comes in between still finds room. Ask until the room is
	// taken, within a bound.
	deadline := time.Now().Add(5 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	code, answer := post(t, srv.URL, strings.NewReader("{}"), 2, nil)
	for code == http.StatusOK && time.Now().Before(deadline) {
		<-tick.C
		code, answer = post(t, srv.URL, strings.NewReader("{}"), 2, nil)
	}
	if code != http.StatusTooManyRequests || !strings.Contains(answer, "request bodies") {
		t.Errorf("a call while the budget is held: %d %s; want resource_exhausted", code, answer)
	}
	// Gone, the stalled request gives its room back; the next call, if it
	// comes first, waits for it.
	c.Close()
	if code, answer := post(t, srv.URL, strings.NewReader("{}"), 2, nil); code != http.StatusOK {
		t.Fatalf("a call once the budget is free: %d %s", code, answer)
	}
}

// TestClientKey: connections are counted by IPv4 address, and by the /64
// of an IPv6 address, so one host cannot widen its cap by using many
// addresses of its prefix; other addresses and prefixes are other clients.
func TestClientKey(t *testing.T) {
	key := func(s string) string { a, _ := net.ResolveTCPAddr("tcp", s); return clientKey(a) }
	if key("[2001:db8:1:2::1]:1") != key("[2001:db8:1:2:ffff::9]:2") {
		t.Error("two addresses of one IPv6 /64 are counted apart")
	}
	if key("[2001:db8:1:2::1]:1") == key("[2001:db8:1:3::1]:1") {
		t.Error("two IPv6 /64s are counted together")
	}
	if key("127.0.0.1:1") != key("127.0.0.1:2") || key("127.0.0.1:1") == key("127.0.0.2:1") {
		t.Error("IPv4 clients are not counted by address")
	}
	if key("[::ffff:10.0.0.1]:1") != key("10.0.0.1:1") {
		t.Error("an IPv4-mapped address is counted apart from its IPv4 address")
	}
}

// emptyObjects is a StartRun in JSON whose inputs list n empty objects:
// three bytes each, some two hundred decoded.
func emptyObjects(n int) string {
	return `{"requestId":"r","contract":{"goal":"g","inputs":{"x":[` + strings.Repeat("{},", n) + `{}]}}}`
}

// TestRequestsAreBoundedByMethod: a request is bounded by its method's
// limit and by what decoding it would cost, before it is decoded: a
// ListRuns of 600 KiB of labels is refused at its Content-Length (its
// method's limit is 512 KiB of JSON), a StartRun of 3 MiB of empty
// objects (some 200 MiB decoded), or the like compressed, as
// resource_exhausted saying what it would cost; none reaches the gRPC
// server. The twins: the same methods within their limits reach it.
func TestRequestsAreBoundedByMethod(t *testing.T) {
	srv, seen := newConsoleWith(t, Options{})
	var labels strings.Builder
	labels.WriteString(`{"labels":{`)
	for i := 0; labels.Len() < 600<<10; i++ {
		fmt.Fprintf(&labels, `"k%d":"",`, i)
	}
	labels.WriteString(`"end":""}}`)
	dear := emptyObjects(1 << 20)
	// Empty objects and lists and small numbers, at random: gzip shrinks
	// them less than 100 times.
	var items strings.Builder
	rnd := rand.New(rand.NewPCG(1, 2))
	for items.Len() < 3<<20 {
		items.WriteString([]string{"{},", "[],", "1,", "0,", "null,", "{},"}[rnd.IntN(6)])
	}
	mixed := `{"requestId":"r","contract":{"goal":"g","inputs":{"x":[` + items.String() + `{}]}}}`
	for _, tc := range []struct {
		name, method string
		body         []byte
		headers      map[string]string
		want         string
	}{
		{"ListRuns of 600 KiB of labels", "ListRuns", []byte(labels.String()), nil, "(rein.v1.ListRunsRequest) is"},
		{"StartRun of 3 MiB of empty objects", "StartRun", []byte(dear), nil, "MiB of memory to decode, over this server's limit of 64 MiB"},
		{"the like, compressed", "StartRun", gzipped(t, []byte(mixed)), map[string]string{"Content-Encoding": "gzip"}, "MiB of memory to decode, over this server's limit of 64 MiB"},
	} {
		code, answer := send(t, srv.URL, tc.method, bytes.NewReader(tc.body), int64(len(tc.body)), connectHeaders(tc.headers))
		if code != http.StatusTooManyRequests || !strings.Contains(answer, tc.want) {
			t.Errorf("%s: %d %.300s; want 429 saying %q", tc.name, code, answer, tc.want)
		}
	}
	if len(seen()) != 0 {
		t.Fatalf("refused calls reached the gRPC server: %v", seen())
	}
	for _, tc := range []struct{ method, body string }{
		{"ListRuns", `{"labels":{"team":"a"}}`},
		{"StartRun", emptyObjects(1000)},
	} {
		if code, answer := call(t, srv.URL, tc.method, tc.body, connectHeaders(nil)); code == http.StatusTooManyRequests || code == http.StatusBadRequest {
			t.Errorf("%s within its limits: %d %.300s", tc.method, code, answer)
		}
	}
	if got := seen(); len(got) != 2 {
		t.Fatalf("the calls within their limits reached the gRPC server as %v; want both", got)
	}
}
