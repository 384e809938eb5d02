package console

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// infoServer answers GetServerInfo with the caller's authorization header
// as the principal, to show what reached the handler.
type infoServer struct {
	reinv1.UnimplementedRunServiceServer
}

func (infoServer) GetServerInfo(ctx context.Context, _ *reinv1.GetServerInfoRequest) (*reinv1.GetServerInfoResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	return &reinv1.GetServerInfoResponse{Caller: &reinv1.Caller{Principal: strings.Join(md.Get("authorization"), ",")}}, nil
}

// newConsole serves the console over a grpc.Server whose one interceptor
// records each method and refuses calls without an authorization header.
func newConsole(t *testing.T) (*httptest.Server, func() []string) {
	t.Helper()
	return newConsoleWith(t, Options{})
}

// newConsoleWith is newConsole with the HTTP face's options.
func newConsoleWith(t *testing.T, opts Options) (*httptest.Server, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	g := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		mu.Lock()
		seen = append(seen, info.FullMethod)
		mu.Unlock()
		if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("authorization")) == 0 {
			return nil, status.Error(codes.Unauthenticated, "no token")
		}
		return next(ctx, req)
	}))
	reinv1.RegisterRunServiceServer(g, infoServer{})
	h, err := Handler(g, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), seen...) }
}

// TestFilesCarryTheSecurityHeaders: the page, its script and its style are
// served from the embedded build, each with the CSP and nosniff.
func TestFilesCarryTheSecurityHeaders(t *testing.T) {
	srv, _ := newConsole(t)
	for path, want := range map[string]string{"/": `src="console.js"`, "/console.js": "", "/console.css": "body"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(want)) || len(body) == 0 {
			t.Errorf("GET %s: %d, %d bytes; want 200 holding %q", path, resp.StatusCode, len(body), want)
		}
		if got := resp.Header.Get("Content-Security-Policy"); got != ContentSecurityPolicy || strings.Contains(got, "unsafe-inline") {
			t.Errorf("GET %s: CSP %q, want %q", path, got, ContentSecurityPolicy)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: no nosniff", path)
		}
	}
}

// TestFilesRefuseWrites: anything but GET or HEAD on the files is refused.
func TestFilesRefuseWrites(t *testing.T) {
	srv, seen := newConsole(t)
	resp, err := http.Post(srv.URL+"/index.html", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /index.html: %d, want 405", resp.StatusCode)
	}
	if len(seen()) != 0 {
		t.Errorf("a POST on a file reached the gRPC server: %v", seen())
	}
}

// connectCall makes a Connect (JSON) unary call, as the console's client does.
func connectCall(t *testing.T, url, method, auth string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/rein.v1.RunService/"+method, strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestCallsGoThroughTheInterceptors: a browser's Connect call reaches the
// handler through the gRPC server's interceptors, its authorization header
// intact; one the interceptor refuses never reaches the handler.
func TestCallsGoThroughTheInterceptors(t *testing.T) {
	srv, seen := newConsole(t)
	code, body := connectCall(t, srv.URL, "GetServerInfo", "Bearer t0k")
	if code != http.StatusOK || !strings.Contains(body, "Bearer t0k") {
		t.Fatalf("GetServerInfo with a token: %d %s; want 200 naming the header", code, body)
	}
	code, body = connectCall(t, srv.URL, "GetServerInfo", "")
	if code != http.StatusUnauthorized || !strings.Contains(body, "no token") || strings.Contains(body, "principal") {
		t.Fatalf("GetServerInfo without a token: %d %s; want 401 from the interceptor", code, body)
	}
	if got := seen(); len(got) != 2 || got[0] != "/rein.v1.RunService/GetServerInfo" {
		t.Fatalf("interceptor saw %v, want both calls", got)
	}
	// Only RunService is offered: the server's other services are not.
	if code, _ := connectCall(t, srv.URL, "../../grpc.health.v1.Health/Check", ""); code == http.StatusOK {
		t.Errorf("a path outside RunService answered 200")
	}
}
