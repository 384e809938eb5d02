package eventkind

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
)

var update = flag.Bool("update", false, "write testdata/summaries.json, the console's fixture, from the kinds' summaries")

// summariesFile holds a sample event of every kind and its summary: the
// console's test (web/test/format.test.ts) reads it to keep
// web/src/format.ts in step with the kinds declared here.
const summariesFile = "testdata/summaries.json"

// payloads are the Event oneof's fields, in the proto's order.
func payloads() []protoreflect.FieldDescriptor {
	var fds []protoreflect.FieldDescriptor
	for i := range payloadOneof.Fields().Len() {
		fds = append(fds, payloadOneof.Fields().Get(i))
	}
	return fds
}

// undeclared names the payloads of the Event oneof that no kind in ks
// declares, and the declarations that are no payload or are declared twice.
func undeclared(ks []Kind) []string {
	var bad []string
	seen := map[string]int{}
	for _, k := range ks {
		seen[k.Name]++
	}
	for _, fd := range payloads() {
		switch n := seen[string(fd.Name())]; {
		case n == 0:
			bad = append(bad, string(fd.Name())+" is not declared")
		case n > 1:
			bad = append(bad, fmt.Sprintf("%s is declared %d times", fd.Name(), n))
		}
		delete(seen, string(fd.Name()))
	}
	for name := range seen {
		bad = append(bad, name+" is no payload of rein.v1.Event")
	}
	slices.Sort(bad)
	return bad
}

// incomplete names what k's declaration leaves out: every part says what
// its reader does with the kind, nothing included.
func incomplete(k Kind) []string {
	var bad []string
	if k.Summary == nil {
		bad = append(bad, "no Summary")
	}
	if k.Tone == nil {
		bad = append(bad, "no Tone (tone(Plain) for none)")
	}
	if k.Span.Call == callUnset {
		bad = append(bad, "no Span.Call (NoCall for none)")
	}
	if k.Span.Event == "" && (k.Span.Attributes != nil || k.Span.Ends != nil) {
		bad = append(bad, "span attributes or an end without a span event")
	}
	if k.Metric.Counts == countUnset {
		bad = append(bad, "no Metric.Counts (Uncounted for none)")
	}
	if (k.Metric.Counts == Write) != (k.Metric.Outcome != "") {
		bad = append(bad, "a Write count needs an Outcome, and only it has one")
	}
	if k.Transcript.Role == roleUnset {
		bad = append(bad, "no Transcript.Role (Unread for none)")
	}
	if reads := k.Transcript.Role == Observed || k.Transcript.Role == Held; reads != (k.Transcript.Observe != nil) {
		bad = append(bad, "an Observed or Held kind needs Observe, and only it has one")
	}
	return bad
}

// Every payload of the Event oneof is declared once, completely, and an
// event of it finds its declaration by the name runstate.PayloadName gives.
func TestEveryKindIsDeclared(t *testing.T) {
	for _, bad := range undeclared(kinds[:]) {
		t.Errorf("%s: declare each kind once, in kinds.go", bad)
	}
	for _, k := range kinds {
		for _, bad := range incomplete(k) {
			t.Errorf("%s: %s", k.Name, bad)
		}
	}
	for _, fd := range payloads() {
		ev := sample(fd)
		if got, want := Of(ev).Name, runstate.PayloadName(ev); got != want || got != string(fd.Name()) {
			t.Errorf("an event of %s finds the declaration of %s", want, got)
		}
	}
	if k := Of(&reinv1.Event{}); k.Name != "none" || k.Summary(&reinv1.Event{}) != "" || len(incomplete(*k)) > 0 {
		t.Errorf("an event with no payload finds %q, want the complete declaration of none", k.Name)
	}
}

// The checks above catch a kind left out, one declared twice or under a
// name the proto lacks, and a declaration missing a part.
func TestUndeclaredKindsAreFound(t *testing.T) {
	ks := slices.Clone(kinds[:])
	ks[0].Name = "run_begun"
	ks = append(ks, ks[1])
	want := []string{"model_requested is declared 2 times", "run_begun is no payload of rein.v1.Event", "run_started is not declared"}
	if got := undeclared(ks); !slices.Equal(got, want) {
		t.Errorf("undeclared = %q, want %q", got, want)
	}
	if got := incomplete(Kind{Name: "x"}); len(got) != 5 {
		t.Errorf("a bare declaration lacks %q, want its 5 parts", got)
	}
	odd := kinds[0]
	odd.Span.Attributes, odd.Metric.Outcome, odd.Transcript.Role = kinds[5].Span.Attributes, "committed", Observed
	if got := incomplete(odd); len(got) != 3 {
		t.Errorf("a declaration with span attributes but no event, an outcome but no write, an Observed role but no Observe: %q, want 3 faults", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("a declaration under a name the proto lacks did not panic")
		}
	}()
	index([]Kind{{Name: "run_begun"}})
}

// summaryCase is one kind in summariesFile: a sample event (protojson)
// and the line the CLI prints for it.
type summaryCase struct {
	Kind    string          `json:"kind"`
	Event   json.RawMessage `json:"event"`
	Summary string          `json:"summary"`
}

// fixture is summariesFile's content.
type fixture struct {
	Note  string        `json:"note"`
	Kinds []summaryCase `json:"kinds"`
}

// makeFixture is summariesFile as this build makes it: each payload's
// sample and summary, in the proto's order.
func makeFixture() ([]byte, error) {
	f := fixture{Note: "Generated by go test ./internal/eventkind -update; DO NOT EDIT. web/test/format.test.ts reads it."}
	for _, fd := range payloads() {
		ev := sample(fd)
		raw, err := protojson.Marshal(ev)
		if err != nil {
			return nil, err
		}
		var event bytes.Buffer
		if err := json.Compact(&event, raw); err != nil { // protojson's spacing varies
			return nil, err
		}
		f.Kinds = append(f.Kinds, summaryCase{Kind: string(fd.Name()), Event: event.Bytes(), Summary: Summary(ev)})
	}
	b, err := json.MarshalIndent(f, "", "  ")
	return append(b, '\n'), err
}

// staleKinds names the kinds whose summary in a fixture is not what this
// build makes of its sample, and the kinds it lacks or has in excess.
func staleKinds(b []byte) ([]string, error) {
	var f fixture
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, err
	}
	var stale []string
	left := map[string]bool{}
	for _, fd := range payloads() {
		left[string(fd.Name())] = true
	}
	for _, c := range f.Kinds {
		var ev reinv1.Event
		if err := protojson.Unmarshal(c.Event, &ev); err != nil {
			return nil, fmt.Errorf("%s: %w", c.Kind, err)
		}
		if !left[c.Kind] || runstate.PayloadName(&ev) != c.Kind {
			stale = append(stale, c.Kind+" (not a kind, or its sample is not one)")
		} else if got := Summary(&ev); got != c.Summary {
			stale = append(stale, fmt.Sprintf("%s (%q, now %q)", c.Kind, c.Summary, got))
		}
		delete(left, c.Kind)
	}
	for k := range left {
		stale = append(stale, k+" (missing)")
	}
	slices.Sort(stale)
	return stale, nil
}

// The console's fixture holds every kind's sample and summary as this
// build makes them; -update writes it again. The console's test
// (web/test/format.test.ts, run by `npm test` in web/) checks
// web/src/format.ts against it.
func TestSummariesFixture(t *testing.T) {
	got, err := makeFixture()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(summariesFile, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(summariesFile)
	if err != nil {
		t.Fatalf("%v: run go test ./internal/eventkind -update", err)
	}
	if !bytes.Equal(got, want) {
		stale, err := staleKinds(want)
		t.Errorf("%s is not what this build makes (stale: %q, %v): run go test ./internal/eventkind -update, "+
			"then (cd web && npm test), and bring web/src/format.ts in step", summariesFile, stale, err)
	}
}

// A fixture with a summary that changed, or a kind missing, is stale, and
// says which.
func TestStaleSummariesAreFound(t *testing.T) {
	b, err := makeFixture()
	if err != nil {
		t.Fatal(err)
	}
	if stale, err := staleKinds(b); err != nil || len(stale) > 0 {
		t.Fatalf("a fresh fixture is stale: %q, %v", stale, err)
	}
	var f fixture
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	f.Kinds[0].Summary = "an older line"
	last := f.Kinds[len(f.Kinds)-1].Kind
	f.Kinds = f.Kinds[:len(f.Kinds)-1]
	b, _ = json.Marshal(f)
	stale, err := staleKinds(b)
	if err != nil || len(stale) != 2 || !strings.HasPrefix(stale[0], "run_started (") || stale[1] != last+" (missing)" {
		t.Errorf("staleKinds = %q, %v; want run_started's changed line and %s missing", stale, err, last)
	}
}

// sample is an event of the payload fd with every field set (the first
// member of each inner oneof, one element of each list) to a value made
// from its name or number, the same in every build: the fixture's sample.
func sample(fd protoreflect.FieldDescriptor) *reinv1.Event {
	ev := &reinv1.Event{RunId: "run_1", Sequence: 7, Actor: "principal:ana",
		RecordedAt: timestamppb.New(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))}
	r := ev.ProtoReflect()
	m := r.NewField(fd).Message()
	fill(m, 0)
	r.Set(fd, protoreflect.ValueOfMessage(m))
	return ev
}

func fill(m protoreflect.Message, depth int) {
	switch m.Descriptor().FullName() {
	case "google.protobuf.Duration":
		copyInto(m, durationpb.New(1250*time.Millisecond).ProtoReflect())
		return
	case "google.protobuf.Timestamp":
		copyInto(m, timestamppb.New(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)).ProtoReflect())
		return
	case "google.protobuf.Value":
		copyInto(m, structpb.NewStringValue("value").ProtoReflect())
		return
	case "google.protobuf.Struct":
		s, _ := structpb.NewStruct(map[string]any{"key": "value"})
		copyInto(m, s.ProtoReflect())
		return
	}
	if depth > 3 {
		return
	}
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() && od.Fields().Get(0) != fd {
			continue
		}
		switch {
		case fd.IsMap():
			v := scalar(fd.MapValue())
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				v = m.Mutable(fd).Map().NewValue()
				fill(v.Message(), depth+1)
			}
			m.Mutable(fd).Map().Set(protoreflect.ValueOfString(string(fd.MapKey().Name())).MapKey(), v)
		case fd.IsList():
			l := m.Mutable(fd).List()
			v := scalar(fd)
			if fd.Kind() == protoreflect.MessageKind {
				v = l.NewElement()
				fill(v.Message(), depth+1)
			}
			l.Append(v)
		case fd.Kind() == protoreflect.MessageKind:
			sub := m.NewField(fd).Message()
			fill(sub, depth+1)
			m.Set(fd, protoreflect.ValueOfMessage(sub))
		default:
			m.Set(fd, scalar(fd))
		}
	}
}

func copyInto(dst, src protoreflect.Message) {
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		dst.Set(fd, v)
		return true
	})
}

// scalar is a field's sample value: a string its name, a number its field
// number (a fraction of it, for a double), true, or an enum's value
// after UNSPECIFIED by the field number.
func scalar(fd protoreflect.FieldDescriptor) protoreflect.Value {
	n := int(fd.Number())
	switch fd.Kind() {
	case protoreflect.MessageKind:
		return protoreflect.Value{}
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(strings.ReplaceAll(string(fd.Name()), "_", "-"))
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		return protoreflect.ValueOfEnum(vals.Get(1 + n%(vals.Len()-1)).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(n))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(int64(n))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(n))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(n))
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(float64(n) / 8)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(n) / 8)
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte(fd.Name()))
	}
	panic(fmt.Sprintf("eventkind: no sample for a %s field", fd.Kind()))
}
