package server

// Tests of requests that do not decode (docs/design.md §10): garbage bytes, a string
// that is not UTF-8, nesting past protobuf's limit. Each is the caller's
// mistake, answered InvalidArgument, not Internal, by unary and streaming
// methods alike; the store is untouched and the server goes on serving.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/reqlimit"
)

// rawCodec sends a request's bytes as they are given, and decodes replies
// as protobuf.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return proto.Unmarshal(data.Materialize(), v.(proto.Message))
}

func (rawCodec) Name() string { return "proto" }

// nested is a StartRunRequest whose contract's inputs nest Struct in Value
// depth times: past protobuf's recursion limit (10,000) it cannot decode.
func nested(depth int) []byte {
	entry := protowire.AppendTag(nil, 1, protowire.BytesType)
	entry = protowire.AppendString(entry, "k")
	entry = protowire.AppendTag(entry, 2, protowire.BytesType)
	entry = protowire.AppendBytes(entry, nestedValue(depth))
	inputs := protowire.AppendTag(nil, 1, protowire.BytesType)
	inputs = protowire.AppendBytes(inputs, entry) // Struct.fields
	contract := protowire.AppendTag(nil, 2, protowire.BytesType)
	contract = protowire.AppendBytes(contract, inputs) // TaskContract.inputs
	req := protowire.AppendTag(nil, 1, protowire.BytesType)
	req = protowire.AppendString(req, "deep")
	req = protowire.AppendTag(req, 2, protowire.BytesType)
	return protowire.AppendBytes(req, contract) // StartRunRequest.contract
}

// nestedValue is a google.protobuf.Value nesting depth Structs.
func nestedValue(depth int) []byte {
	// Value{struct_value: Struct{fields: {"k": Value{…}}}}, from the inside out.
	inner := []byte{}
	for range depth {
		entry := protowire.AppendTag(nil, 1, protowire.BytesType)
		entry = protowire.AppendString(entry, "k")
		entry = protowire.AppendTag(entry, 2, protowire.BytesType)
		entry = protowire.AppendBytes(entry, inner) // map value: a Value
		st := protowire.AppendTag(nil, 1, protowire.BytesType)
		st = protowire.AppendBytes(st, entry) // Struct.fields entry
		inner = protowire.AppendTag(nil, 5, protowire.BytesType)
		inner = protowire.AppendBytes(inner, st) // Value.struct_value
	}
	return inner
}

func TestUndecodableRequestIsInvalidArgument(t *testing.T) {
	s := newTCPServer(t, Config{})
	ctx := context.Background()
	badUTF8 := protowire.AppendTag(nil, 1, protowire.BytesType)
	badUTF8 = protowire.AppendBytes(badUTF8, []byte{0xff, 0xfe, 'r'})
	deep := nested(10_050)
	if err := proto.Unmarshal(nested(50), &reinv1.StartRunRequest{}); err != nil {
		t.Fatalf("the nesting is not a StartRunRequest at a shallow depth: %v", err)
	}
	for _, tc := range []struct {
		name   string
		method string
		body   []byte
	}{
		{"garbage bytes", "/rein.v1.RunService/GetRun", []byte{0xff, 0xff, 0xff, 0xff, 0x0f}},
		{"invalid UTF-8 in run_id", "/rein.v1.RunService/GetRun", badUTF8},
		{"invalid UTF-8 in a cancel", "/rein.v1.RunService/CancelRun", badUTF8},
		{"nesting past the limit", "/rein.v1.RunService/StartRun", deep},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.conn.Invoke(ctx, tc.method, tc.body, &reinv1.GetRunResponse{}, grpc.ForceCodecV2(rawCodec{}))
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "not a valid rein.v1.") {
				t.Fatalf("%s: %v, want InvalidArgument naming the message", tc.method, err)
			}
		})
	}
	t.Run("a stream's request", func(t *testing.T) {
		st, err := s.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/rein.v1.RunService/WatchRun", grpc.ForceCodecV2(rawCodec{}))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.SendMsg(badUTF8); err != nil {
			t.Fatal(err)
		}
		_ = st.CloseSend()
		err = st.RecvMsg(&reinv1.WatchRunResponse{})
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("WatchRun with an undecodable request: %v, want InvalidArgument", err)
		}
	})
	// The twins: the same methods with requests that decode are answered as
	// usual, and the server still serves.
	t.Run("a valid request", func(t *testing.T) {
		good, _ := proto.Marshal(&reinv1.GetRunRequest{RunId: "run_missing"})
		err := s.conn.Invoke(ctx, "/rein.v1.RunService/GetRun", good, &reinv1.GetRunResponse{}, grpc.ForceCodecV2(rawCodec{}))
		if status.Code(err) != codes.NotFound {
			t.Fatalf("GetRun of a missing run: %v, want NotFound", err)
		}
		runs, err := s.client.ListRuns(ctx, &reinv1.ListRunsRequest{})
		if err != nil || len(runs.GetRuns()) != 0 {
			t.Fatalf("ListRuns after the bad requests: %v, %d runs; want none stored", err, len(runs.GetRuns()))
		}
	})
}

// TestUndecodableRequestNeedsCredentials: without a token a caller learns
// nothing of its request's form: Unauthenticated comes first.
func TestUndecodableRequestNeedsCredentials(t *testing.T) {
	s := newTCPServer(t, Config{Directory: testDirectory(t)})
	err := s.conn.Invoke(context.Background(), "/rein.v1.RunService/GetRun", []byte{0xff, 0xff, 0xff}, &reinv1.GetRunResponse{}, grpc.ForceCodecV2(rawCodec{}))
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("undecodable request without a token: %v, want Unauthenticated", err)
	}
}

// labels is n label filters, about 12 bytes each on the wire.
func labels(n int) map[string]string {
	l := make(map[string]string, n)
	for i := range n {
		l[fmt.Sprintf("k%07d", i)] = ""
	}
	return l
}

// inputs is a contract whose inputs hold v n times in a list.
func inputs(v *structpb.Value, n int) *reinv1.TaskContract {
	list := make([]*structpb.Value, n)
	for i := range list {
		list[i] = v
	}
	c := contract(nil, final("done"))
	c.Inputs = &structpb.Struct{Fields: map[string]*structpb.Value{"x": structpb.NewListValue(&structpb.ListValue{Values: list})}}
	return c
}

// TestRequestOverItsLimitIsRefused: a request is bounded by its method's
// limit before it is decoded (docs/operating.md, Request limits): a
// ListRuns or WatchRuns of 160 KiB of labels, a GetRun carrying 1 MiB of
// unknown fields, a StartRun of 2.5 MiB, and a StartRun of 1.5 MiB of
// empty values (some 100 MiB decoded) are each ResourceExhausted, saying
// the size, the limit and what to do; nothing is stored. The twins: the
// same methods within their limits are served, a StartRun of 1.9 MB of
// text among them.
func TestRequestOverItsLimitIsRefused(t *testing.T) {
	s := newTCPServer(t, Config{})
	ctx := context.Background()
	unknown := protowire.AppendTag(nil, 99, protowire.BytesType)
	unknown = protowire.AppendBytes(unknown, make([]byte, 1<<20))
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"ListRuns of 160 KiB of labels", func() error {
			_, err := s.client.ListRuns(ctx, &reinv1.ListRunsRequest{Labels: labels(12000)})
			return err
		}, "over the 131072 this server accepts for it: send a smaller one"},
		{"GetRun with 1 MiB of unknown fields", func() error {
			return s.conn.Invoke(ctx, "/rein.v1.RunService/GetRun", unknown, &reinv1.GetRunResponse{}, grpc.ForceCodecV2(rawCodec{}))
		}, "rein.v1.GetRunRequest) is 1048581 bytes, over the 131072"},
		{"StartRun of 2.5 MiB", func() error {
			c := contract(nil, final("done"))
			c.Inputs = &structpb.Struct{Fields: map[string]*structpb.Value{"x": structpb.NewStringValue(strings.Repeat("x", 5<<19))}}
			_, err := s.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "big", Contract: c})
			return err
		}, "a contract may be at most 2097152 bytes: put large inputs in the workspace"},
		{"StartRun of 1.5 MiB of empty values", func() error {
			_, err := s.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "dear", Contract: inputs(&structpb.Value{}, 3<<18)})
			return err
		}, "MiB of memory to decode, over this server's limit of 64 MiB"},
		{"WatchRuns of 160 KiB of labels", func() error {
			// A watch that matches nothing sends nothing: a refusal comes
			// at once, a watch that was taken ends at the deadline.
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			st, err := s.client.WatchRuns(ctx, &reinv1.WatchRunsRequest{Labels: labels(12000)})
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		}, "rein.v1.WatchRunsRequest) is"},
	} {
		err := tc.call()
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want ResourceExhausted saying %q", tc.name, err, tc.want)
		}
	}
	if runs, err := s.client.ListRuns(ctx, &reinv1.ListRunsRequest{}); err != nil || len(runs.GetRuns()) != 0 {
		t.Fatalf("ListRuns after the refusals: %v, %d runs; want none stored", err, len(runs.GetRuns()))
	}

	if _, err := s.client.ListRuns(ctx, &reinv1.ListRunsRequest{Labels: labels(4000)}); err != nil {
		t.Errorf("ListRuns of 4,000 labels: %v", err)
	}
	c := contract(nil, final("done"))
	c.Inputs = &structpb.Struct{Fields: map[string]*structpb.Value{"x": structpb.NewStringValue(strings.Repeat("x", 1900000))}}
	if _, err := s.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "text", Contract: c}); err != nil {
		t.Errorf("StartRun of 1.9 MB of text: %v", err)
	}
	if _, err := s.client.StartRun(ctx, &reinv1.StartRunRequest{RequestId: "values", Contract: inputs(structpb.NewNullValue(), 1000)}); err != nil {
		t.Errorf("StartRun of 1,000 nulls: %v", err)
	}
	// Decoded, and answered by its handler: a cursor past the last change.
	st, err := s.client.WatchRuns(ctx, &reinv1.WatchRunsRequest{Labels: labels(10), AfterCursor: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); status.Code(err) != codes.OutOfRange {
		t.Errorf("WatchRuns of 10 labels past the last change: %v; want OutOfRange", err)
	}
}

// TestDecodingBudgetIsHeldUntilAnswered: a decoded request holds its
// estimate in the decoding budget until its unary call is answered, so a
// second that does not fit waits and, when the budget stays full, is
// refused ResourceExhausted (retry in a moment); once the first is
// answered the budget is free again. A stream's request gives it back as
// soon as it is decoded. The twin of the refusal is the third request,
// which fits.
func TestDecodingBudgetIsHeldUntilAnswered(t *testing.T) {
	wire, err := proto.Marshal(&reinv1.ListRunsRequest{Labels: labels(2000)})
	if err != nil {
		t.Fatal(err)
	}
	cost := reqlimit.Estimate((&reinv1.ListRunsRequest{}).ProtoReflect().Descriptor(), wire)
	c := newRequestCodec(4 << 20)
	c.decoding = reqlimit.NewBudget(cost * 3 / 2) // room for one
	c.wait = 50 * time.Millisecond
	decode := func() *reinv1.ListRunsRequest {
		m := &reinv1.ListRunsRequest{}
		buf := mem.SliceBuffer(wire)
		if err := c.Unmarshal(mem.BufferSlice{buf}, m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	first := decode()
	if err := c.take(first); err != nil || len(first.GetLabels()) != 2000 {
		t.Fatalf("the first request: %v, %d labels", err, len(first.GetLabels()))
	}
	second := decode()
	if err := c.take(second); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "retry in a moment") {
		t.Fatalf("the second request, while the first holds the budget: %v; want ResourceExhausted, retry in a moment", err)
	}
	c.release(second) // holds nothing: gives nothing back
	answered := false
	if _, err := c.holdUnary(context.Background(), first, nil, func(context.Context, any) (any, error) {
		answered = true
		return nil, nil
	}); err != nil || !answered {
		t.Fatalf("the first request's call: %v, answered %v", err, answered)
	}
	third := decode()
	if err := c.take(third); err != nil {
		t.Fatalf("the third request, after the first was answered: %v", err)
	}
	// A stream's request gives its room back once decoded.
	c.release(third)
	ss := &decodedStream{ServerStream: recvStream{codec: c, wire: wire}, codec: c}
	for i := range 3 {
		if err := ss.RecvMsg(&reinv1.ListRunsRequest{}); err != nil {
			t.Fatalf("a stream's request %d: %v", i, err)
		}
	}
	var left int
	c.held.Range(func(any, any) bool { left++; return true })
	c.refused.Range(func(any, any) bool { left++; return true })
	if left != 0 {
		t.Fatalf("%d requests left behind in the codec's maps", left)
	}
}

// recvStream is a server stream whose every message is wire, decoded by
// codec as the server's transport does.
type recvStream struct {
	grpc.ServerStream
	codec *requestCodec
	wire  []byte
}

func (s recvStream) RecvMsg(m any) error {
	return s.codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(s.wire)}, m)
}
