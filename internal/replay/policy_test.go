package replay

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/engine"
	"github.com/reinhq/rein/internal/policy"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store/mem"
	"github.com/reinhq/rein/internal/tools"
)

// holder is a policy file's rules, written to a file of the test's.
func holder(t *testing.T, body string) *policy.Holder {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policy.toml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	h, err := policy.NewHolder(p)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

const allowSmall = "[[rules]]\nname = \"small-refunds\"\ntools = [\"refund\"]\neffect = \"allow\"\nwhen = \"args.amount <= 2000\"\n"

// recordPolicyRun records a refund the server's rules allow (no person
// approves it), then a read, then an answer, and returns its log. The
// model gives the refund call ID w1 and the read r1, or ids when given.
func recordPolicyRun(t *testing.T, rules *policy.Holder, ids ...string) []*reinv1.Event {
	t.Helper()
	ctx := context.Background()
	fixtures := tools.NewFixtures(map[string][]tools.FixtureResult{
		"get":    {{Output: structpb.NewStringValue("invoice INV-42: open, 1200 EUR")}},
		"refund": {{Preview: structpb.NewStringValue("refund 1200 EUR"), Receipt: structpb.NewStringValue("re_1")}},
	})
	st := mem.New()
	clock := &fakeClock{now: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	e := engine.New(engine.Config{Store: st, Tools: fixtures, Clock: clock.Now, NoTimers: true, Workers: 1, NewID: seededIDs(t.Name()),
		Policy: &policy.Checker{Server: rules}})
	defer e.Close()
	if ids == nil {
		ids = []string{"w1", "r1"}
	}
	c := contract(nil, call("refund", ids[0], map[string]any{"amount": 1200}), call("get", ids[1], map[string]any{"id": "INV-42"}), final("refunded"))
	c.Tools = c.Tools[:2] // get, refund
	run, _, err := e.Start(ctx, engine.StartRequest{RequestID: "policy", Contract: c, Principal: "alice", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Wait(ctx, run.RunID); err != nil {
		t.Fatal(err)
	}
	evs, err := st.Events(ctx, run.RunID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if last, _ := st.Load(ctx, run.RunID); last.Status != reinv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("the recorded run is %s, want completed", runstate.StatusName(last.Status))
	}
	return evs
}

// TestReplayUnderPolicy: a run recorded under the server's rules replays
// as recorded without them (their decisions are in the log), and as
// recorded under the same rules; under rules that decide otherwise the
// divergence is the first call they decide otherwise.
func TestReplayUnderPolicy(t *testing.T) {
	recorded := recordPolicyRun(t, holder(t, allowSmall))
	var decided uint64
	for _, ev := range recorded {
		if pd := ev.GetPolicyDecided(); pd != nil && pd.GetRule() == "small-refunds" {
			decided = ev.GetSequence()
		}
	}
	if decided == 0 {
		t.Fatal("the recording has no policy_decided by small-refunds")
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		rules *policy.Holder
		at    uint64 // 0: no divergence
		field string
	}{
		{"as recorded", nil, 0, ""},
		{"the same rules", holder(t, allowSmall), 0, ""},
		{"a stricter limit", holder(t, "[[rules]]\nname = \"tiny-refunds\"\ntools = [\"refund\"]\neffect = \"ask\"\nwhen = \"args.amount > 1000\"\n"), decided, "policy_decided.effect"},
		{"no rules", holder(t, ""), decided, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Run(ctx, recorded, Options{Policy: tc.rules})
			if err != nil {
				t.Fatal(err)
			}
			d := res.Divergence
			switch {
			case tc.at == 0 && d != nil:
				t.Fatalf("diverged: %v", d)
			case tc.at != 0 && d == nil:
				t.Fatal("no divergence, want one at the refund's policy decision")
			case tc.at != 0 && (d.Sequence != tc.at || tc.field != "" && d.Field != tc.field):
				t.Fatalf("diverged at %d (%s), want %d (%s): %v", d.Sequence, d.Field, tc.at, tc.field, d)
			}
		})
	}
}

// allowBoth is allowSmall and a rule that allows every read of get.
const allowBoth = allowSmall + "[[rules]]\nname = \"reads\"\ntools = [\"get\"]\neffect = \"allow\"\nwhen = \"true\"\n"

// TestReplayCallIDs: a run whose model gave its calls no call ID, or one
// ID twice, is recorded with an ID of each call's own (docs/design.md §3),
// and replays as recorded: the server's decisions the replay answers with
// are each their own call's. The twin: IDs of the model's own, each once.
func TestReplayCallIDs(t *testing.T) {
	for _, tc := range []struct {
		name string
		ids  []string
	}{
		{"no ids", []string{"", ""}},
		{"one id twice", []string{"x", "x"}},
		{"the model's ids", []string{"w1", "r1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recorded := recordPolicyRun(t, holder(t, allowBoth), tc.ids...)
			var calls []string
			seen := map[string]bool{}
			for _, ev := range recorded {
				if tr := ev.GetModelReturned().GetDecision().GetToolCall(); tr != nil {
					calls = append(calls, tr.GetCallId())
				}
				if pd := ev.GetPolicyDecided(); pd != nil {
					if pd.GetCallId() == "" || seen[pd.GetCallId()] {
						t.Errorf("policy_decided of call %q: each call's decision goes by an ID of its own", pd.GetCallId())
					}
					seen[pd.GetCallId()] = true
				}
			}
			switch {
			case len(calls) != 2 || calls[0] == "" || calls[1] == "" || calls[0] == calls[1]:
				t.Fatalf("the recorded calls go by IDs %q, want two IDs, each its own", calls)
			case tc.ids[0] != "" && calls[0] != tc.ids[0]:
				t.Errorf("the first call goes by %q, want the model's %q", calls[0], tc.ids[0])
			case tc.ids[1] != "" && tc.ids[1] != tc.ids[0] && calls[1] != tc.ids[1]:
				t.Errorf("the second call goes by %q, want the model's %q", calls[1], tc.ids[1])
			}
			for _, rules := range []*policy.Holder{nil, holder(t, allowBoth)} {
				res, err := Run(context.Background(), recorded, Options{Policy: rules})
				if err != nil {
					t.Fatal(err)
				}
				if res.Divergence != nil {
					t.Fatalf("diverged (server rules given: %v): %v", rules != nil, res.Divergence)
				}
			}
		})
	}
}
