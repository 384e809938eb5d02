package httpface_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// decodeBoundBytes is the bound docs/operating.md states (Request limits)
// on what requests that cost far more decoded than on the wire may grow
// the server's peak memory by, at the default --max-msg-bytes of 4 MiB.
const decodeBoundBytes = 512 << 20

// TestDecodingIsBounded: requests that are cheap on the wire and dear
// decoded (lists of empty values, objects or nulls, which decode to 30 to
// 100 times their size), twenty at a time at 4 MiB each, on both ports:
// StartRun by an operator over Connect JSON and over gRPC (and at 2 MiB,
// within its wire limit), and ListRuns with a label list by a viewer on
// both. Each is refused
// resource_exhausted before it is decoded, and the server's peak memory
// grows by less than the bound in docs/operating.md. Before, the gRPC
// StartRuns of empty values alone grew it by 3.9 GiB. The twin: calls of
// the same methods within their limits are served, after.
func TestDecodingIsBounded(t *testing.T) {
	const opToken, viewerToken = "op-token", "viewer-token"
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	if err := os.WriteFile(tokens, []byte(`{"principals": [`+
		`{"id": "op", "tenant": "acme", "roles": ["operator"], "token_sha256": "`+sha(opToken)+`"},`+
		`{"id": "eve", "tenant": "acme", "roles": ["viewer"], "token_sha256": "`+sha(viewerToken)+`"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := serve(t, "--tokens", tokens, "--rate", "0")
	conn, err := grpc.NewClient(srv.grpcAddr(t), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	runs := reinv1.NewRunServiceClient(conn)
	as := func(token string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	}
	web := func(method, token, body string) (int, string) {
		req, err := http.NewRequest(http.MethodPost, "http://"+srv.web+"/rein.v1.RunService/"+method, strings.NewReader(body))
		if err != nil {
			return 0, err.Error()
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Connect-Protocol-Version", "1")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// Warm: the first calls allocate what every call shares.
	for range 3 {
		if _, err := runs.GetServerInfo(as(viewerToken), &reinv1.GetServerInfoRequest{}); err != nil {
			t.Fatal(err)
		}
		if code, body := web("GetServerInfo", viewerToken, "{}"); code != http.StatusOK {
			t.Fatalf("a good call: %d %s", code, body)
		}
	}
	before := srv.peakRSS(t)

	const wire = 4<<20 - 64<<10 // under --max-msg-bytes, with room for the rest of the request
	emptyList := func(v *structpb.Value, each, wire int) *reinv1.StartRunRequest {
		list := make([]*structpb.Value, wire/each)
		for i := range list {
			list[i] = v
		}
		return &reinv1.StartRunRequest{RequestId: "big", Contract: &reinv1.TaskContract{
			Goal:   "hold the server's memory",
			Inputs: &structpb.Struct{Fields: map[string]*structpb.Value{"x": structpb.NewListValue(&structpb.ListValue{Values: list})}},
		}}
	}
	labels := map[string]string{}
	for i := 0; len(labels)*16 < wire; i++ {
		labels[fmt.Sprintf("%08d", i)] = ""
	}
	jsonList := func(item string) string {
		var b strings.Builder
		b.WriteString(`{"requestId":"big","contract":{"goal":"hold the server's memory","inputs":{"x":[`)
		for b.Len() < wire {
			b.WriteString(item + ",")
		}
		b.WriteString(item + `]}}}`)
		return b.String()
	}
	var jsonLabels strings.Builder
	jsonLabels.WriteString(`{"labels":{`)
	for i := 0; jsonLabels.Len() < wire; i++ {
		fmt.Fprintf(&jsonLabels, `"%d":"",`, i)
	}
	jsonLabels.WriteString(`"end":""}}`)

	grpcAttack := func(name string, call func() error) {
		t.Helper()
		errs := make([]error, 20)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = call() }()
		}
		wg.Wait()
		for i, err := range errs {
			if status.Code(err) != codes.ResourceExhausted {
				t.Errorf("%s over gRPC (#%d): %v; want ResourceExhausted", name, i, err)
			}
		}
		t.Logf("%s over gRPC: peak RSS grew %d MiB", name, (srv.peakRSS(t)-before)>>20)
	}
	webAttack := func(name, method, token, body string) {
		t.Helper()
		codes, answers := make([]int, 20), make([]string, 20)
		var wg sync.WaitGroup
		for i := range codes {
			wg.Add(1)
			go func() { defer wg.Done(); codes[i], answers[i] = web(method, token, body) }()
		}
		wg.Wait()
		for i := range codes {
			// A client still sending when the refusal comes may see its
			// connection closed instead: refused all the same.
			if codes[i] != http.StatusTooManyRequests && !(codes[i] == 0 && (strings.Contains(answers[i], "connection reset") || strings.Contains(answers[i], "broken pipe"))) {
				t.Errorf("%s over HTTP (#%d): %d %.300s; want 429", name, i, codes[i], answers[i])
			}
		}
		t.Logf("%s over HTTP: peak RSS grew %d MiB", name, (srv.peakRSS(t)-before)>>20)
	}

	// The HTTP face's first: the peak only grows, so the smaller come first.
	webAttack("StartRun of empty objects", "StartRun", opToken, jsonList("{}"))
	webAttack("StartRun of nulls", "StartRun", opToken, jsonList("null"))
	webAttack("ListRuns of labels", "ListRuns", viewerToken, jsonLabels.String())

	empties, nulls, values := emptyList(structpb.NewStructValue(&structpb.Struct{}), 4, wire), emptyList(structpb.NewNullValue(), 4, wire), emptyList(&structpb.Value{}, 2, wire)
	// Within StartRun's wire limit, over what decoding may cost.
	within := emptyList(&structpb.Value{}, 2, 2<<20-64<<10)
	grpcAttack("StartRun of empty values", func() error { _, err := runs.StartRun(as(opToken), values); return err })
	grpcAttack("StartRun of 2 MiB of empty values", func() error { _, err := runs.StartRun(as(opToken), within); return err })
	grpcAttack("StartRun of empty objects", func() error { _, err := runs.StartRun(as(opToken), empties); return err })
	grpcAttack("StartRun of nulls", func() error { _, err := runs.StartRun(as(opToken), nulls); return err })
	grpcAttack("ListRuns of labels", func() error {
		_, err := runs.ListRuns(as(viewerToken), &reinv1.ListRunsRequest{Labels: labels})
		return err
	})

	after := srv.peakRSS(t)
	t.Logf("peak RSS %d MiB before the attacks, %d MiB after: grew %d MiB (bound %d MiB)", before>>20, after>>20, (after-before)>>20, decodeBoundBytes>>20)
	if after-before > decodeBoundBytes {
		t.Errorf("160 requests, 20 at a time, grew the server's peak memory by %d MiB, over the bound of %d MiB", (after-before)>>20, decodeBoundBytes>>20)
	}

	// The twin: the same methods within their limits are served.
	small := &reinv1.StartRunRequest{RequestId: "small", Contract: &reinv1.TaskContract{
		Goal:   "answer",
		Inputs: &structpb.Struct{Fields: map[string]*structpb.Value{"x": structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewNullValue(), structpb.NewStructValue(&structpb.Struct{})}})}},
		Model:  &reinv1.ModelSpec{Provider: "script", Script: []*reinv1.ScriptedReply{{Reply: &reinv1.ScriptedReply_Decision{Decision: &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: "done"}}}}}}},
	}}
	if _, err := runs.StartRun(as(opToken), small); err != nil {
		t.Fatalf("after the attacks, a small StartRun over gRPC: %v", err)
	}
	if _, err := runs.ListRuns(as(viewerToken), &reinv1.ListRunsRequest{Labels: map[string]string{"team": "a"}}); err != nil {
		t.Fatalf("after the attacks, a ListRuns over gRPC: %v", err)
	}
	if code, body := web("StartRun", opToken, `{"requestId":"small-web","contract":{"goal":"answer","inputs":{"x":[{},null]},"model":{"provider":"script","script":[{"decision":{"finalAnswer":{"text":"done"}}}]}}}`); code != http.StatusOK {
		t.Fatalf("after the attacks, a small StartRun over HTTP: %d %s", code, body)
	}
	if code, body := web("ListRuns", viewerToken, `{"labels":{"team":"a"}}`); code != http.StatusOK {
		t.Fatalf("after the attacks, a ListRuns over HTTP: %d %s", code, body)
	}
}

func sha(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// grpcAddr is the server's gRPC address, from its log.
func (s *server) grpcAddr(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`"rein serving" addr=(\S+)`).FindStringSubmatch(s.output())
	if m == nil {
		t.Fatalf("no gRPC address in rein serve's log:\n%s", s.output())
	}
	return m[1]
}
