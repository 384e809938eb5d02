// Package facetest is for tests only: the refund node that the faces'
// tests (internal/a2aface, internal/aguiface, internal/mcpface) and the
// A2A client's tests (internal/tools/a2a) each stand up. It holds the
// refund example as a catalog task, its fixture tools, a tokens
// directory, and a node on a temporary bbolt file served over an
// in-process gRPC connection. Each test keeps its own principals, flags
// and faces; only what they share is here. Nothing in the shipped binary
// imports it (`go list -deps ./cmd/rein` does not name it). It stands up
// a server, so it lies beside the server rather than under internal/
// (tests/layering).
package facetest

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"

	"github.com/reinhq/rein/internal/auth"
	"github.com/reinhq/rein/internal/catalog"
	"github.com/reinhq/rein/internal/store/bolt"
	"github.com/reinhq/rein/internal/tools"
	"github.com/reinhq/rein/server"
)

// refundDir is examples/refund, found from the test's working directory
// (its package's directory) by walking up to the module's go.mod.
func refundDir(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "examples", "refund")
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("facetest: no go.mod above the test's directory; run the test inside the rein module")
		}
		dir = up
	}
}

// RefundTask is examples/refund as catalog task "refund": its contract,
// its scripted model inline (in place of its inputs), and an input schema
// requiring a string invoice_id. A test adds what its face shows (a
// description, a stricter schema) before writing it.
func RefundTask(t testing.TB) map[string]any {
	t.Helper()
	root := refundDir(t)
	data, err := os.ReadFile(filepath.Join(root, "task.json"))
	if err != nil {
		t.Fatal(err)
	}
	var task map[string]any
	if err := json.Unmarshal(data, &task); err != nil {
		t.Fatal(err)
	}
	model, err := os.ReadFile(filepath.Join(root, "model.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var script []any
	for _, line := range strings.Split(strings.TrimSpace(string(model)), "\n") {
		var reply any
		if err := json.Unmarshal([]byte(line), &reply); err != nil {
			t.Fatal(err)
		}
		script = append(script, reply)
	}
	delete(task, "inputs")
	task["model"] = map[string]any{"provider": "script", "script": script}
	task["name"] = "refund"
	task["input_schema"] = map[string]any{"type": "object", "properties": map[string]any{"invoice_id": map[string]any{"type": "string"}}, "required": []any{"invoice_id"}}
	return task
}

// Catalog writes each file (a name such as "refund.json" and its JSON) into
// a temporary directory and returns the directory and a holder of it.
func Catalog(t testing.TB, files map[string]string) (string, *catalog.Holder) {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tasks, err := catalog.NewHolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir, tasks
}

// JSON is v marshalled, for a catalog file.
func JSON(t testing.TB, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// RefundTools is the fixture executor of examples/refund/tools.json.
func RefundTools(t testing.TB) tools.Executor {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(refundDir(t), "tools.json"))
	if err != nil {
		t.Fatal(err)
	}
	fx, err := tools.ParseFixtures(data)
	if err != nil {
		t.Fatal(err)
	}
	return fx
}

// Principal is one entry of a test's tokens directory; its token is its
// ID + "-token" (see Token).
type Principal struct {
	ID     string
	Tenant string
	Roles  []string
}

// Token is the bearer token of the principal id.
func Token(id string) string { return id + "-token" }

// Directory is a tokens directory of principals.
func Directory(t testing.TB, principals ...Principal) *auth.Directory {
	t.Helper()
	type entry struct {
		ID          string   `json:"id"`
		Tenant      string   `json:"tenant"`
		Roles       []string `json:"roles"`
		TokenSHA256 string   `json:"token_sha256"`
	}
	var file struct {
		Principals []entry `json:"principals"`
	}
	for _, p := range principals {
		file.Principals = append(file.Principals, entry{ID: p.ID, Tenant: p.Tenant, Roles: p.Roles, TokenSHA256: auth.HashToken(Token(p.ID))})
	}
	d, err := auth.ParseDirectory([]byte(JSON(t, file)))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// As is ctx carrying who's token to the node's gRPC services.
func As(ctx context.Context, who string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+Token(who))
}

// Node opens a node on cfg, with a store on a temporary bbolt file when
// cfg.Store is nil, and serves it (see Serve). The test's cleanup stops
// the serving and closes the node.
func Node(t testing.TB, cfg server.Config) (*server.Node, *grpc.ClientConn) {
	t.Helper()
	if cfg.Store == nil {
		st, err := bolt.Open(filepath.Join(t.TempDir(), "rein.db"), bolt.Options{})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Store = st
	}
	node, err := server.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	cc, stop := Serve(t, node)
	t.Cleanup(func() {
		stop()
		node.Close()
	})
	return node, cc
}

// Serve serves node's gRPC on an in-process listener and returns a
// connection to it, and what closes the connection and stops the serving
// (which the test's cleanup also does; twice is harmless). It leaves the
// node open.
func Serve(t testing.TB, node *server.Node) (*grpc.ClientConn, func()) {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = node.GRPC.Serve(lis)
	}()
	cc, err := grpc.NewClient("passthrough:///rein", grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		node.GRPC.Stop()
		<-served
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = cc.Close()
			node.GRPC.Stop()
			<-served
		})
	}
	t.Cleanup(stop)
	return cc, stop
}
