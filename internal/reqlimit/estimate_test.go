package reqlimit

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"connectrpc.com/vanguard"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/taskcontract"
)

// allocated is what f allocates, in bytes: the least of runs runs.
//
// The count is the process's, so what another goroutine allocates
// meanwhile (the runtime's, the test framework's) is in it: where a few
// bytes matter, f runs more than once and the least is taken, which is
// f's own when any run had the process to itself.
func allocated(runs int, f func()) int64 {
	least := int64(-1)
	for range runs {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		if n := int64(after.TotalAlloc - before.TotalAlloc); least < 0 || n < least {
			least = n
		}
	}
	return least
}

func listOf(v *structpb.Value, n int) *reinv1.StartRunRequest {
	list := make([]*structpb.Value, n)
	for i := range list {
		list[i] = v
	}
	return &reinv1.StartRunRequest{RequestId: "r", Contract: &reinv1.TaskContract{Goal: "g",
		Inputs: &structpb.Struct{Fields: map[string]*structpb.Value{"x": structpb.NewListValue(&structpb.ListValue{Values: list})}}}}
}

func nested(depth int) *structpb.Value {
	v := structpb.NewNullValue()
	for range depth {
		v = structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{v}})
	}
	return v
}

// costly are requests of about 1 MiB shaped to cost the most decoded, and
// some ordinary ones. In JSON, "statuses" and "empty replies" are members
// of typed messages, which the estimate takes for a Struct's, far dearer.
func costly() map[string]proto.Message {
	labels := map[string]string{}
	for i := range 60000 {
		labels[fmt.Sprint(i)] = ""
	}
	statuses := make([]reinv1.RunStatus, 1<<20)
	for i := range statuses {
		statuses[i] = reinv1.RunStatus_RUN_STATUS_RUNNING
	}
	replies := make([]*reinv1.ScriptedReply, 1<<16)
	for i := range replies {
		replies[i] = &reinv1.ScriptedReply{}
	}
	var unknown []byte
	for len(unknown) < 1<<20 {
		unknown = protowire.AppendTag(unknown, 99, protowire.VarintType)
		unknown = protowire.AppendVarint(unknown, 0)
	}
	get := &reinv1.GetRunRequest{RunId: "r"}
	get.ProtoReflect().SetUnknown(unknown)
	return map[string]proto.Message{
		"empty values":  listOf(&structpb.Value{}, 1<<19),
		"empty objects": listOf(structpb.NewStructValue(&structpb.Struct{}), 1<<18),
		"empty lists":   listOf(structpb.NewListValue(&structpb.ListValue{}), 1<<18),
		"nulls":         listOf(structpb.NewNullValue(), 1<<18),
		"numbers":       listOf(structpb.NewNumberValue(1), 1<<17),
		"empty strings": listOf(structpb.NewStringValue(""), 1<<18),
		"nested lists":  listOf(nested(4000), 1),
		"labels":        &reinv1.ListRunsRequest{Labels: labels},
		"statuses":      &reinv1.ListRunsRequest{Statuses: statuses},
		"empty replies": &reinv1.StartRunRequest{Contract: &reinv1.TaskContract{Model: &reinv1.ModelSpec{Script: replies}}},
		"unknown":       get,
		"a goal":        &reinv1.StartRunRequest{RequestId: "r", Contract: &reinv1.TaskContract{Goal: strings.Repeat("g", 1<<20)}},
	}
}

// TestEstimateIsAboveWhatDecodingAllocates: for requests shaped to cost
// the most decoded (long lists of empty values, objects, nulls, label
// maps, packed enums, unknown fields, deep nesting), Estimate is above
// what proto.Unmarshal allocates. The twin: it is not far above (at most
// four times), so that ordinary requests are not refused as dear.
func TestEstimateIsAboveWhatDecodingAllocates(t *testing.T) {
	for name, m := range costly() {
		wire, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		Estimate(m.ProtoReflect().Descriptor(), wire) // the descriptors' lazy parts
		var est int64
		scanned := allocated(3, func() { est = Estimate(m.ProtoReflect().Descriptor(), wire) })
		got := m.ProtoReflect().New().Interface()
		actual := allocated(1, func() {
			if err := proto.Unmarshal(wire, got); err != nil {
				t.Fatal(err)
			}
		})
		t.Logf("%-14s %8d bytes: decoding allocates %9d (%5.1f×), estimate %9d (%.2f× that)", name, len(wire), actual, float64(actual)/float64(len(wire)), est, float64(est)/float64(actual))
		if est < actual {
			t.Errorf("%s: the estimate, %d, is below what decoding allocates, %d", name, est, actual)
		}
		if est > 4*actual+64<<10 {
			t.Errorf("%s: the estimate, %d, is over 4 times what decoding allocates, %d", name, est, actual)
		}
		if scanned > 1<<10 {
			t.Errorf("%s: estimating allocated %d bytes", name, scanned)
		}
	}
}

// TestEstimateJSONIsAboveWhatTranscodingAllocates: the same for JSON:
// EstimateJSON is above what the console's transcoder allocates decoding
// the JSON and encoding it as protobuf, and at most four times that.
func TestEstimateJSONIsAboveWhatTranscodingAllocates(t *testing.T) {
	codec := vanguard.NewJSONCodec(protoregistry.GlobalTypes)
	for name, m := range costly() {
		if name == "nested lists" || name == "empty values" {
			continue // past protojson's nesting limit; no JSON
		}
		text, err := codec.MarshalAppend(nil, m)
		if err != nil {
			t.Fatal(err)
		}
		est := EstimateJSON(text)
		got := m.ProtoReflect().New().Interface()
		actual := allocated(1, func() {
			if err := codec.Unmarshal(text, got); err != nil {
				t.Fatal(err)
			}
			if _, err := proto.Marshal(got); err != nil {
				t.Fatal(err)
			}
		})
		t.Logf("%-14s %8d bytes: transcoding allocates %9d (%5.1f×), estimate %9d (%.2f× that)", name, len(text), actual, float64(actual)/float64(len(text)), est, float64(est)/float64(actual))
		if est < actual {
			t.Errorf("%s: the estimate, %d, is below what transcoding allocates, %d", name, est, actual)
		}
		if typed := name == "statuses" || name == "empty replies"; !typed && est > 4*actual+64<<10 {
			t.Errorf("%s: the estimate, %d, is over 4 times what transcoding allocates, %d", name, est, actual)
		}
	}
}

// TestWireLimits: a request carrying a contract may be as large as a
// contract may be and a little more, an import as large as the server
// takes, a read no more than SmallRequest; none more than the server's
// limit.
func TestWireLimits(t *testing.T) {
	const max = 4 << 20
	if contractBytes != taskcontract.MaxBytes {
		t.Errorf("the contract's limit here is %d, and %d in internal/step", contractBytes, taskcontract.MaxBytes)
	}
	if got := WireLimit("rein.v1.StartRunRequest", max); got < taskcontract.MaxBytes || got > taskcontract.MaxBytes+128<<10 {
		t.Errorf("StartRun's limit is %d, not a little over the contract's %d", got, taskcontract.MaxBytes)
	}
	for name, want := range map[string]int64{
		"rein.v1.ImportRunRequest": max, "rein.v1.ListRunsRequest": SmallRequest, "rein.v1.GetRunRequest": SmallRequest,
		"grpc.health.v1.HealthCheckRequest": SmallRequest,
	} {
		if got := WireLimit(protoreflectName(name), max); got != want {
			t.Errorf("%s's limit is %d, want %d", name, got, want)
		}
	}
	if got := WireLimit("rein.v1.StartRunRequest", 1<<20); got != 1<<20 {
		t.Errorf("StartRun's limit on a server of 1 MiB is %d, want 1 MiB", got)
	}
	// Every request the limits name is one RunService takes.
	methods := reinv1.File_rein_v1_run_service_proto.Services().ByName("RunService").Methods()
	takes := map[string]bool{}
	for i := range methods.Len() {
		takes[string(methods.Get(i).Input().FullName())] = true
	}
	for name := range wireLimits {
		if !takes[string(name)] {
			t.Errorf("the wire limits name %s, which no RunService method takes", name)
		}
	}
}

func protoreflectName(s string) protoreflect.FullName { return protoreflect.FullName(s) }
