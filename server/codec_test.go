package server

// Tests of requests that do not decode (docs/design.md §10): garbage bytes, a string
// that is not UTF-8, nesting past protobuf's limit. Each is the caller's
// mistake, answered InvalidArgument, not Internal, by unary and streaming
// methods alike; the store is untouched and the server goes on serving.

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
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
