package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"

	"github.com/reinhq/rein/internal/a2aface"
	"github.com/reinhq/rein/server/facetest"
)

// refundCatalog writes examples/refund as a catalog task named refund in a
// directory of its own: its scripted model inline, each reply delayed so
// that the run is still running when a test cuts it.
func refundCatalog(t *testing.T) string {
	t.Helper()
	task := facetest.RefundTask(t)
	for _, reply := range task["model"].(map[string]any)["script"].([]any) {
		reply.(map[string]any)["delay_ms"] = 300
	}
	dir, _ := facetest.Catalog(t, map[string]string{"refund.json": facetest.JSON(t, task)})
	return dir
}

// a2aUpdate is what a test compares of a streamed update: its kind, its
// sequence and its state.
type a2aUpdate struct {
	kind  string
	seq   uint64
	state a2a.TaskState
}

func (u a2aUpdate) String() string {
	return u.kind + "@" + strconv.FormatUint(u.seq, 10) + ":" + string(u.state)
}

// updateOf is ev as an a2aUpdate; ok is false for the task a stream
// opens with.
func updateOf(t *testing.T, ev a2a.Event) (a2aUpdate, bool) {
	t.Helper()
	var meta map[string]any
	u := a2aUpdate{}
	switch e := ev.(type) {
	case *a2a.TaskStatusUpdateEvent:
		u.kind, u.state, meta = "status", e.Status.State, e.Metadata
	case *a2a.TaskArtifactUpdateEvent:
		u.kind, meta = "artifact", e.Metadata
	default:
		return u, false
	}
	n, ok := meta[a2aface.SequenceKey].(float64)
	if !ok {
		t.Fatalf("%T has no %s: %v", ev, a2aface.SequenceKey, meta)
	}
	u.seq = uint64(n)
	return u, true
}

// approvalOf is the approval data part of an input-required status
// message, nil when there is none.
func approvalOf(m *a2a.Message) map[string]any {
	if m == nil {
		return nil
	}
	for _, p := range m.Parts {
		if d, ok := p.Content.(a2a.Data); ok {
			if obj, ok := d.Value.(map[string]any); ok && obj["kind"] == "approval" {
				return obj
			}
		}
	}
	return nil
}

// TestA2AResubscribeAcrossAKill: a client follows a refund run's stream
// (SubscribeToTask from its start) on a real `rein serve --http-a2a`;
// the server is SIGKILLed mid-run (as the stream opens, while the model
// is still deciding; or at the first update, the approval pause) and
// restarted on the same store and address; the client resubscribes with the last sequence it saw
// (Rein-After-Sequence), approves the write when the run asks, and reads
// to completed. The updates before the cut and after it, together, are
// every update of the run (a fresh subscription from 0 once it ended)
// exactly once, in order. The twin: resubscribing after the kill with no
// sequence repeats what the client had already seen.
func TestA2AResubscribeAcrossAKill(t *testing.T) {
	for _, atTask := range []bool{true, false} {
		t.Run("atTask="+strconv.FormatBool(atTask), func(t *testing.T) { resubscribeAcrossAKill(t, atTask) })
	}
}

func resubscribeAcrossAKill(t *testing.T, atTask bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t.Setenv(cliEnv, "1") // the servers are this test binary running the CLI
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	fixtures, err := filepath.Abs(filepath.Join("..", "..", "examples", "refund", "tools.json"))
	if err != nil {
		t.Fatal(err)
	}
	tokens := writeFile(t, "tokens.json", `{"principals": [{"id": "ops", "tenant": "acme", "roles": ["operator", "approver"], "token_sha256": "`+hashOf("ops-token")+`"}]}`)
	web := freeAddr(t)
	serve := []string{"serve", "--listen", "127.0.0.1:0", "--db", newDB(t), "--http", web, "--http-a2a",
		"--tokens", tokens, "--tasks", refundCatalog(t), "--tools", "fixture:" + fixtures}
	first := startGrpcurlServer(t, t.TempDir(), exe, serve)

	auth := a2aclient.ServiceParams{"Authorization": {"Bearer ops-token"}}
	ctx = a2aclient.AttachServiceParams(ctx, auth)
	card, err := agentcard.NewResolver(http.DefaultClient).Resolve(ctx, "http://"+web)
	if err != nil {
		t.Fatal(err)
	}
	client, err := a2aclient.NewFromCard(ctx, card)
	if err != nil {
		t.Fatal(err)
	}
	msg := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewDataPart(map[string]any{"invoice_id": "INV-42"}))
	msg.SetMeta("skill", "refund")
	res, err := client.SendMessage(ctx, &a2a.SendMessageRequest{Message: msg, Config: &a2a.SendMessageConfig{ReturnImmediately: true}})
	if err != nil {
		t.Fatal(err)
	}
	started, ok := res.(*a2a.Task)
	if !ok {
		t.Fatalf("SendMessage answered %T, want the task", res)
	}

	// Before the cut: follow from the run's start, and kill the server as
	// soon as the task (atTask) or the first update has come.
	var before []a2aUpdate
	var last uint64
	kill := func() {
		if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	for ev, err := range client.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: started.ID}) {
		if err != nil {
			break // the kill
		}
		u, ok := updateOf(t, ev)
		if !ok {
			task := ev.(*a2a.Task)
			last = uint64(task.Metadata[a2aface.SequenceKey].(float64))
			if atTask {
				if task.Status.State != a2a.TaskStateWorking && task.Status.State != a2a.TaskStateSubmitted {
					t.Fatalf("the stream opened with the run %s: the kill would not cut it mid-run", task.Status.State)
				}
				kill()
			}
			continue
		}
		before, last = append(before, u), u.seq
		if len(before) == 1 && !atTask {
			kill()
		}
	}
	<-first.exited
	if len(before) == 0 && !atTask {
		t.Fatal("no update before the kill")
	}
	if n := len(before); n > 0 && before[n-1].state.Terminal() {
		t.Fatalf("the run ended (%s) before the kill: the test cut nothing", before[n-1].state)
	}

	startGrpcurlServer(t, t.TempDir(), exe, serve)
	waitForCard(t, ctx, "http://"+web)

	// The twin: with no sequence, the resubscription starts over, so a
	// client that does not say what it saw sees it twice.
	if len(before) > 0 {
		again, ok := firstUpdate(t, client.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: started.ID}))
		if !ok || again != before[0] {
			t.Errorf("a resubscription without %s opened with %v, want the first update again, %v", a2aface.AfterHeader, again, before[0])
		}
	}

	// After the cut: resume after the last sequence seen, approve the
	// write when the run asks, read to the end.
	rctx := a2aclient.AttachServiceParams(ctx, a2aclient.ServiceParams{"Authorization": auth["Authorization"], a2aface.AfterHeader: {strconv.FormatUint(last, 10)}})
	var after []a2aUpdate
	approved := false
	approve := func(m *a2a.Message) {
		p := approvalOf(m)
		if p == nil || approved {
			return
		}
		approved = true
		reply := a2a.NewMessageForTask(a2a.MessageRoleUser, started, a2a.NewDataPart(map[string]any{"decision": "approve", "proposal_hash": p["hash"]}))
		if _, err := client.SendMessage(ctx, &a2a.SendMessageRequest{Message: reply, Config: &a2a.SendMessageConfig{ReturnImmediately: true}}); err != nil {
			t.Fatalf("approve: %v", err)
		}
	}
	for ev, err := range client.SubscribeToTask(rctx, &a2a.SubscribeToTaskRequest{ID: started.ID}) {
		if err != nil {
			t.Fatalf("the resubscription: %v (after %v)", err, after)
		}
		switch e := ev.(type) {
		case *a2a.Task:
			if e.Status.State == a2a.TaskStateInputRequired {
				approve(e.Status.Message)
			}
		case *a2a.TaskStatusUpdateEvent:
			if e.Status.State == a2a.TaskStateInputRequired {
				approve(e.Status.Message)
			}
		}
		if u, ok := updateOf(t, ev); ok {
			after = append(after, u)
		}
	}
	t.Logf("before the cut %v, after it %v", before, after)
	if !approved {
		t.Fatalf("the run never asked for approval; updates %v then %v", before, after)
	}

	var all []a2aUpdate
	for ev, err := range client.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: started.ID}) {
		if err != nil {
			t.Fatalf("the full subscription: %v", err)
		}
		if u, ok := updateOf(t, ev); ok {
			all = append(all, u)
		}
	}
	if n := len(all); n == 0 || all[n-1].state != a2a.TaskStateCompleted {
		t.Fatalf("every update of the run: %v, want it to end completed", all)
	}
	got := append(append([]a2aUpdate{}, before...), after...)
	if len(got) != len(all) {
		t.Fatalf("before the cut %v, after it %v: %d updates, want every update of the run once, %v", before, after, len(got), all)
	}
	for i := range all {
		if got[i] != all[i] {
			t.Fatalf("update %d: %v, want %v (before the cut %v, after it %v)", i, got[i], all[i], before, after)
		}
		if i > 0 && all[i].seq < all[i-1].seq {
			t.Errorf("update %d at sequence %d follows one at %d: out of order", i, all[i].seq, all[i-1].seq)
		}
	}
}

// firstUpdate is the first update (not the task) a stream carries.
func firstUpdate(t *testing.T, events func(func(a2a.Event, error) bool)) (a2aUpdate, bool) {
	t.Helper()
	for ev, err := range events {
		if err != nil {
			return a2aUpdate{}, false
		}
		if u, ok := updateOf(t, ev); ok {
			return u, true
		}
	}
	return a2aUpdate{}, false
}

// waitForCard polls base's agent card until it is served, under ctx.
func waitForCard(t *testing.T, ctx context.Context, base string) {
	t.Helper()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+a2aface.CardPath, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the agent card at %s was not served again: %v", base, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
