package webhook

import (
	"encoding/json"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/secret"
)

var (
	running  = reinv1.RunStatus_RUN_STATUS_RUNNING
	approval = reinv1.RunStatus_RUN_STATUS_NEEDS_APPROVAL
	done     = reinv1.RunStatus_RUN_STATUS_COMPLETED
)

func changed(seq uint64, from, to reinv1.RunStatus) *reinv1.Event {
	return &reinv1.Event{RunId: "r1", Sequence: seq, RecordedAt: timestamppb.New(time.Unix(1700000000, 0)),
		Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{From: from, To: to}}}
}

func toolReturned(seq uint64) *reinv1.Event {
	return &reinv1.Event{RunId: "r1", Sequence: seq, Payload: &reinv1.Event_ToolReturned{ToolReturned: &reinv1.ToolReturned{}}}
}

func TestMatchChoosesByStatusKindAndLabels(t *testing.T) {
	before := &runstate.State{RunID: "r1", Tenant: "t", Status: running}
	after := &runstate.State{RunID: "r1", Tenant: "t", Status: done, Contract: &reinv1.TaskContract{Labels: map[string]string{"team": "billing"}}}
	events := []*reinv1.Event{toolReturned(5), changed(6, running, approval), changed(7, approval, running), changed(8, running, done)}
	for _, c := range []struct {
		name string
		sub  *reinv1.Webhook
		want []string // the types, in order
	}{
		{"every status change by default", &reinv1.Webhook{Name: "a"}, []string{"run.needs_approval", "run.running", "run.completed"}},
		{"one status", &reinv1.Webhook{Name: "a", Statuses: []reinv1.RunStatus{approval}}, []string{"run.needs_approval"}},
		{"a kind only", &reinv1.Webhook{Name: "a", EventKinds: []string{"tool_returned"}}, []string{"event.tool_returned"}},
		{"a kind and a status", &reinv1.Webhook{Name: "a", EventKinds: []string{"tool_returned"}, Statuses: []reinv1.RunStatus{done}}, []string{"event.tool_returned", "run.completed"}},
		{"labels that match", &reinv1.Webhook{Name: "a", Labels: map[string]string{"team": "billing"}, Statuses: []reinv1.RunStatus{done}}, []string{"run.completed"}},
		{"labels that do not", &reinv1.Webhook{Name: "a", Labels: map[string]string{"team": "ops"}}, nil},
		{"a kind no event has", &reinv1.Webhook{Name: "a", EventKinds: []string{"run_steered"}}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := (&Matcher{}).Match([]*reinv1.Webhook{c.sub}, before, after, events)
			var types []string
			for _, d := range got {
				types = append(types, d.GetType())
				if d.GetId() != DeliveryID("a", "r1", d.GetSequence()) || d.GetTenant() != "t" {
					t.Errorf("delivery %v: wrong id or tenant", d)
				}
			}
			if len(types) != len(c.want) {
				t.Fatalf("types = %v, want %v", types, c.want)
			}
			for i := range types {
				if types[i] != c.want[i] {
					t.Fatalf("types = %v, want %v", types, c.want)
				}
			}
		})
	}
}

// TestMatchBodyOfAPause: what a person must decide is in the body, a
// secret redacted, and the body is the same bytes however often made.
func TestMatchBodyOfAPause(t *testing.T) {
	args, _ := structpb.NewStruct(map[string]any{"amount": 42, "note": "key sk-live-0123456789abcdef", "blob": string(make([]byte, 2000))})
	p := &reinv1.Proposal{ProposalId: "p1", Tool: "refund", Arguments: args, Hash: "abc", ExpiresAt: timestamppb.New(time.Unix(1700003600, 0))}
	before := &runstate.State{RunID: "r1", Tenant: "t", Status: running}
	after := &runstate.State{RunID: "r1", Tenant: "t", Status: approval, Pending: &reinv1.PendingAction{Action: &reinv1.PendingAction_Proposal{Proposal: p}}}
	m := &Matcher{PublicURL: "https://rein.example.com/", Secrets: secret.New(map[string]string{"STRIPE": "sk-live-0123456789abcdef"})}
	events := []*reinv1.Event{changed(4, running, approval)}
	d := m.Match([]*reinv1.Webhook{{Name: "a"}}, before, after, events)
	if len(d) != 1 {
		t.Fatalf("deliveries = %v", d)
	}
	again := m.Match([]*reinv1.Webhook{{Name: "a"}}, before, after, events)
	if string(again[0].GetBody()) != string(d[0].GetBody()) {
		t.Fatal("the same append made two bodies")
	}
	var got Payload
	if err := json.Unmarshal(d[0].GetBody(), &got); err != nil {
		t.Fatal(err)
	}
	a := got.Data.Approval
	if got.Type != "run.needs_approval" || got.Data.Status != "needs_approval" || got.Data.PreviousStatus != "running" || a == nil ||
		a.Tool != "refund" || a.Hash != "abc" || a.ExpiresAt == nil || got.Data.ConsoleURL != "https://rein.example.com/#/runs/r1" {
		t.Fatalf("body = %s", d[0].GetBody())
	}
	if string(a.Arguments["note"]) != `"key [secret STRIPE]"` {
		t.Errorf("note = %s, want the secret redacted", a.Arguments["note"])
	}
	if len(a.Arguments["blob"]) > maxArgument+16 {
		t.Errorf("a long argument is %d bytes in the body, want it cut near %d", len(a.Arguments["blob"]), maxArgument)
	}
}

func TestBackoff(t *testing.T) {
	half := func() float64 { return 0.5 }
	zero := func() float64 { return 0 }
	var prev time.Duration
	for n := 1; n <= 40; n++ {
		d := Backoff(n, 0, half)
		if d < prev || d > backoffMax {
			t.Fatalf("Backoff(%d) = %v after %v: want it to grow up to %v", n, d, prev, backoffMax)
		}
		prev = d
	}
	if Backoff(1, 0, zero) != backoffBase/2 || Backoff(3, 0, zero) != 2*backoffBase {
		t.Errorf("Backoff(1), Backoff(3) with no jitter = %v, %v", Backoff(1, 0, zero), Backoff(3, 0, zero))
	}
	if Backoff(1, 0, zero) == Backoff(1, 0, func() float64 { return 0.99 }) {
		t.Error("jitter changes nothing")
	}
	if got := Backoff(1, 10*time.Minute, half); got != 10*time.Minute {
		t.Errorf("Backoff with Retry-After 10m = %v", got)
	}
	if got := Backoff(1, 1000*time.Hour, half); got != maxRetryAfter {
		t.Errorf("Backoff with Retry-After 1000h = %v, want it bounded at %v", got, maxRetryAfter)
	}
	// A day of retries is dozens of attempts, not thousands.
	var total time.Duration
	n := 0
	for total < 24*time.Hour {
		n++
		total += Backoff(n, 0, half)
	}
	if n < 10 || n > 60 {
		t.Errorf("a day of retries is %d attempts", n)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Unix(1700000000, 0)
	for v, want := range map[string]time.Duration{
		"": 0, "30": 30 * time.Second, "-3": 0, "soon": 0,
		now.Add(time.Minute).UTC().Format("Mon, 02 Jan 2006 15:04:05 GMT"): time.Minute,
	} {
		if got := retryAfter(v, now); got != want {
			t.Errorf("retryAfter(%q) = %v, want %v", v, got, want)
		}
	}
}
