package server

// Tests of how rein settles a write whose commit did not answer: the tool's
// lookup, a second dispatch with the same key, and a person's re-approval.

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestCommitFailureLookup: when a commit fails and the tool can look writes
// up, the lookup settles it: applied → its receipt is the write's, with no
// second commit; not applied → the write is dispatched again with the same
// key; the lookup failing → the outcome is unknown. The twin: a commit that
// answers needs no lookup.
func TestCommitFailureLookup(t *testing.T) {
	found := structpb.NewStringValue("refund rf_77 found")
	for _, tc := range []struct {
		name     string
		failures int32
		lookup   func(op string) (*structpb.Value, bool, error)
		payloads string
		lookups  int32
		commits  int
		receipt  *structpb.Value
	}{
		{"commit answers", 0, func(string) (*structpb.Value, bool, error) { return nil, false, errors.New("not called") },
			"approval_decided,write_dispatched,write_committed,status_changed", 0, 1, refundReceipt},
		{"applied", 1, func(string) (*structpb.Value, bool, error) { return found, true, nil },
			"approval_decided,write_dispatched,write_committed,status_changed", 1, 1, found},
		{"not applied", 1, func(string) (*structpb.Value, bool, error) { return nil, false, nil },
			"approval_decided,write_dispatched,write_dispatched,write_committed,status_changed", 1, 2, refundReceipt},
		{"not applied, second commit fails", 2, func(string) (*structpb.Value, bool, error) { return nil, false, nil },
			"approval_decided,write_dispatched,write_dispatched,write_outcome_unknown", 1, 2, nil},
		{"lookup fails", 1, func(string) (*structpb.Value, bool, error) { return nil, false, errors.New("ledger unavailable") },
			"approval_decided,write_dispatched,write_outcome_unknown", 1, 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := openPeopleServer(t, Config{}, tc.lookup)
			s.tools.failures.Store(tc.failures)
			run := s.begin(t, writeContract(refundCall(), final("refunded")), stNeedsApproval)
			resp, err := s.decide(run, approveVerdict, "")
			if err != nil {
				t.Fatalf("approval: %v", err)
			}
			evs, op := s.outcome(t, run.GetRunId(), run.GetVersion())
			if len(evs) > len(strings.Split(tc.payloads, ",")) {
				evs = evs[:len(strings.Split(tc.payloads, ","))]
			}
			if got := payloadNames(evs); got != tc.payloads {
				t.Fatalf("after the approval: %s, want %s first; log:\n%s", got, tc.payloads, logText(s.events(t, run.GetRunId())))
			}
			for _, ev := range evs {
				if wd := ev.GetWriteDispatched(); wd != nil && wd.GetOperationId() != op {
					t.Errorf("a second dispatch with key %q, want the first's %s", wd.GetOperationId(), op)
				}
			}
			if n := s.tools.commitCounts()[op]; n != tc.commits || len(s.tools.commitCounts()) != 1 {
				t.Errorf("commits %v, want %d of operation %s", s.tools.commitCounts(), tc.commits, op)
			}
			if n := s.lookup.lookups.Load(); n != tc.lookups {
				t.Errorf("%d lookups, want %d", n, tc.lookups)
			}
			if tc.receipt == nil {
				if resp.GetRun().GetStatus() != stNeedsApproval || resp.GetRun().GetPending().GetProposal() == nil {
					t.Errorf("after an unknown outcome the run is %v with pending %v, want needs_approval with the proposal pending again",
						resp.GetRun().GetStatus(), resp.GetRun().GetPending())
				}
				return
			}
			committed := evs[len(evs)-2].GetWriteCommitted()
			if committed.GetOperationId() != op || !proto.Equal(committed.GetReceipt(), tc.receipt) {
				t.Errorf("write_committed %v, want operation %s with receipt %v", committed, op, tc.receipt)
			}
			all := s.watchToEnd(t, run.GetRunId(), run.GetVersion())
			wantChange(t, all[len(all)-1], stRunning, stCompleted, "final_answer")
		})
	}
}

// TestReapprovalLooksUpFirst: a write whose outcome is unknown and whose
// tool can look writes up is looked up when a person approves it again:
// found → its receipt, with no second commit; not found → sent again with
// the same key.
func TestReapprovalLooksUpFirst(t *testing.T) {
	found := structpb.NewStringValue("refund rf_77 found")
	for _, tc := range []struct {
		name     string
		applied  bool
		payloads string
		commits  int
	}{
		{"applied", true, "approval_decided,write_committed,status_changed", 1},
		{"not applied", false, "approval_decided,write_dispatched,write_committed,status_changed", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			// The first lookup (right after the failed commit) fails, so the
			// outcome is unknown; the one at the second approval answers.
			s := openPeopleServer(t, Config{}, func(string) (*structpb.Value, bool, error) {
				if calls.Add(1) == 1 {
					return nil, false, errors.New("ledger unavailable")
				}
				if tc.applied {
					return found, true, nil
				}
				return nil, false, nil
			})
			s.tools.failures.Store(1)
			run := s.begin(t, writeContract(refundCall(), final("refunded")), stNeedsApproval)
			resp, err := s.decide(run, approveVerdict, "")
			if err != nil || resp.GetRun().GetStatus() != stNeedsApproval {
				t.Fatalf("first approval: %v, %v; want the outcome unknown", resp.GetRun().GetStatus(), err)
			}
			again := resp.GetRun()
			if _, err := s.decide(again, approveVerdict, "try again"); err != nil {
				t.Fatalf("second approval: %v", err)
			}
			evs := s.watchToEnd(t, run.GetRunId(), again.GetVersion())
			n := len(strings.Split(tc.payloads, ","))
			if len(evs) < n || payloadNames(evs[:n]) != tc.payloads {
				t.Fatalf("after the second approval: %s, want %s first", payloadNames(evs), tc.payloads)
			}
			if calls.Load() != 2 {
				t.Errorf("%d lookups, want 2", calls.Load())
			}
			for _, c := range s.tools.commitCounts() {
				if c != tc.commits {
					t.Errorf("commits %v, want %d", s.tools.commitCounts(), tc.commits)
				}
			}
			if tc.applied && !proto.Equal(evs[1].GetWriteCommitted().GetReceipt(), found) {
				t.Errorf("receipt %v, want the lookup's", evs[1].GetWriteCommitted().GetReceipt())
			}
		})
	}
}
