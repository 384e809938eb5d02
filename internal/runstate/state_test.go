package runstate

// Tests of the State <-> reinv1.Run round trip that snapshots and the API use.

import (
	"reflect"
	"slices"
	"testing"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

func TestStateProtoRoundTrip(t *testing.T) {
	full := State{
		RunID:            testRunID,
		Status:           needsApproval,
		StatusReason:     "write proposed",
		Version:          42,
		Contract:         testContract(),
		Principal:        "alice",
		Tenant:           "acme",
		RequestID:        "req-1",
		TraceID:          "0123456789abcdef0123456789abcdef",
		TraceParent:      "0123456789abcdef",
		Steps:            7,
		InputTokens:      1234,
		CacheWriteTokens: 55,
		CacheReadTokens:  66,
		OutputTokens:     567,
		ToolCalls:        5,
		CostUSD:          0.125,
		Deadline:         epoch.Add(90 * time.Minute),
		ModelInFlight:    true,
		ApprovedWrite:    &reinv1.Proposal{ProposalId: "p-0", Tool: "write_file", Hash: "def", RunVersion: 30},
		WriteOperationID: "op_p-0",
		Pending: &reinv1.PendingAction{Action: &reinv1.PendingAction_Proposal{Proposal: &reinv1.Proposal{
			ProposalId: "p-1", Tool: "write_file", Hash: "abc", RunVersion: 41,
		}}},
		Result:                &reinv1.FinalAnswer{Text: "done", Data: structpb.NewNumberValue(3)},
		LastError:             "no such file",
		OpenCall:              &reinv1.ToolCall{Tool: "read_file", CallId: "c-3", Arguments: &structpb.Struct{Fields: map[string]*structpb.Value{"path": structpb.NewStringValue("a")}}},
		OpenCallTier:          reinv1.ToolTier_TOOL_TIER_READ,
		CallsByTool:           map[string]uint32{"read_file": 3, "write_file": 2},
		FailingChecks:         "0f1e",
		FailingChecksRepeated: 2,
		Price:                 &reinv1.ModelPrice{InputPerMtok: 3, OutputPerMtok: 15},
		Steers:                []string{"steer-1", "steer-2"},
		SteersWaiting:         1,
		Policy: &reinv1.PolicyDecided{CallId: "c-2", Tool: "write_file", Effect: reinv1.PolicyEffect_POLICY_EFFECT_ALLOW,
			Source: reinv1.PolicySource_POLICY_SOURCE_CONTRACT, Rule: "small", When: "true"},
		Raised:          Spend{Steps: 5, Tokens: 1000, CostUSD: 0.5},
		DelegatedBy:     &reinv1.DelegatedBy{ParentRunId: "run_parent", Sequence: 9, TaskIndex: 1, RootRunId: "run_root", Depth: 2},
		PromptCacheKey:  "run_forked_from",
		ChildrenStarted: 3,
		Children:        []ChildLoan{{RunID: "run_c1", Lent: Spend{Steps: 4, Tokens: 100, CostUSD: 0.5, ToolCalls: 2}}},
		Lent:            Spend{Steps: 4, Tokens: 100, CostUSD: 0.5, ToolCalls: 2},
		Returned:        Spend{Steps: 2, Tokens: 50, CostUSD: 0.25, ToolCalls: 1},
		CreatedAt:       epoch,
		UpdatedAt:       epoch.Add(time.Minute + 7*time.Nanosecond),
		Archive:         &reinv1.RunArchive{Key: "acme/2030/01/02/run_1.rein", Sha256: "ab12", SizeBytes: 4096},
		ToolDigests:     []*reinv1.ToolDigest{{Name: "refunds.issue", Digest: "d1", Tier: reinv1.ToolTier_TOOL_TIER_WRITE, SchemaDigest: "s1", Server: "tool-server refunds"}},
		PolicyDigest:    "p1",
	}
	// Every field is set, so a field added to State without a round trip
	// fails here.
	v := reflect.ValueOf(full)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("test state leaves %s zero; set it", v.Type().Field(i).Name)
		}
	}

	check := func(t *testing.T, got State) {
		t.Helper()
		if !stateEqual(got, full) {
			t.Errorf("round trip:\n got  %+v\n want %+v", got, full)
		}
	}
	t.Run("with_contract", func(t *testing.T) {
		check(t, FromProto(full.Proto(true), nil))
	})
	t.Run("contract_apart", func(t *testing.T) {
		r := full.Proto(false)
		if r.Contract != nil {
			t.Errorf("Proto(false) carries the contract")
		}
		check(t, FromProto(r, full.Contract))
	})
	t.Run("through_bytes", func(t *testing.T) {
		b, err := proto.Marshal(full.Proto(false))
		if err != nil {
			t.Fatal(err)
		}
		var r reinv1.Run
		if err := proto.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		check(t, FromProto(&r, testContract()))
	})
	t.Run("zero_times_stay_zero", func(t *testing.T) {
		s := full
		s.Deadline, s.CreatedAt, s.UpdatedAt = time.Time{}, time.Time{}, time.Time{}
		r := s.Proto(true)
		if r.Deadline != nil || r.CreatedAt != nil || r.UpdatedAt != nil {
			t.Errorf("zero times encoded: %v %v %v", r.Deadline, r.CreatedAt, r.UpdatedAt)
		}
		got := FromProto(r, nil)
		if !got.Deadline.IsZero() || !got.CreatedAt.IsZero() || !got.UpdatedAt.IsZero() {
			t.Errorf("zero times decoded as %v %v %v", got.Deadline, got.CreatedAt, got.UpdatedAt)
		}
	})
	t.Run("a_folded_run", func(t *testing.T) {
		s := mustApply(t, stateAt(t, running), modelRequested(2), modelReturned(3, 9, 4), toolRequested(4),
			approvalRequested(5, "p-9"), modelRequested(6))
		if !s.ModelInFlight {
			t.Fatal("expected a model call in flight")
		}
		if got := FromProto(s.Proto(true), nil); !stateEqual(got, s) {
			t.Errorf("round trip:\n got  %+v\n want %+v", got, s)
		}
	})
}

// stateEqual compares states field by field: protos by value, times by
// instant.
func stateEqual(a, b State) bool {
	// Every field, so that one added to State is compared without a change
	// here: messages by proto.Equal, times by Equal, the rest as values.
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	for i := range va.NumField() {
		x, y := va.Field(i).Interface(), vb.Field(i).Interface()
		switch xv := x.(type) {
		case proto.Message:
			if !proto.Equal(xv, y.(proto.Message)) {
				return false
			}
		case time.Time:
			if !xv.Equal(y.(time.Time)) {
				return false
			}
		case []*reinv1.ToolDigest:
			if !slices.EqualFunc(xv, y.([]*reinv1.ToolDigest), func(m, n *reinv1.ToolDigest) bool { return proto.Equal(m, n) }) {
				return false
			}
		default:
			if !reflect.DeepEqual(x, y) {
				return false
			}
		}
	}
	return true
}
