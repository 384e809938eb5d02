package replay

import (
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// TestEqualIsProtoEqual holds equal to proto.Equal on every recorded event
// and on a full event of every payload, each against a copy of itself and
// against every copy with one field changed: set when it was unset, changed
// or cleared when it was set, at any depth, and with unknown fields added.
// The generated comparison alone decides each event and its copy.
func TestEqualIsProtoEqual(t *testing.T) {
	events := testEvents(t)
	mutated := 0
	for _, ev := range events {
		name := fmt.Sprintf("sequence %d (%s)", ev.GetSequence(), ev.GetActor())
		if cp := proto.Clone(ev).(*reinv1.Event); !equalEvent(ev, cp) || !equal(ev, cp) {
			t.Fatalf("%s: not equal to its copy", name)
		} else if !eqEvent(ev, cp) {
			// The events hold no float the generated comparison leaves to
			// proto.Equal (a NaN, a -0) and no unknown field.
			t.Errorf("%s: the generated comparison leaves it and its copy to proto.Equal", name)
		}
		for _, m := range mutants(ev) {
			mutated++
			mev := m.msg.(*reinv1.Event)
			want := proto.Equal(ev, mev)
			if got := equalEvent(ev, mev); got != want {
				t.Errorf("%s, %s: equal %v, proto.Equal %v", name, m.change, got, want)
			}
			if got := equalEvent(mev, ev); got != want {
				t.Errorf("%s, %s (swapped): equal %v, proto.Equal %v", name, m.change, got, want)
			}
		}
	}
	if mutated < 1000 {
		t.Errorf("only %d changed events were compared", mutated)
	}
	t.Logf("%d events, %d changed copies", len(events), mutated)
}

// testEvents are every recorded event and a full event of every payload.
func testEvents(t *testing.T) []*reinv1.Event {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(recordings, "*.rein"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no recordings in %s (%v)", recordings, err)
	}
	var events []*reinv1.Event
	for _, f := range files {
		events = append(events, readExport(t, f).GetEvents()...)
	}
	return append(events, fullEvents(t)...)
}

// TestEqualWithSharedMessages: two events holding the same message (equal's
// shortcut) are equal, and the shared message hides no difference beside it.
func TestEqualWithSharedMessages(t *testing.T) {
	args, _ := structpb.NewStruct(map[string]any{"id": "INV-42"})
	decision := &reinv1.Decision{Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{Tool: "get", Arguments: args}}}
	returned := func(d *reinv1.Decision, cost float64) *reinv1.Event {
		return &reinv1.Event{Sequence: 3, Payload: &reinv1.Event_ModelReturned{ModelReturned: &reinv1.ModelReturned{Decision: d, CostUsd: cost}}}
	}
	if !equalEvent(returned(decision, 1), returned(decision, 1)) {
		t.Error("two events sharing a decision are not equal")
	}
	if equalEvent(returned(decision, 1), returned(decision, 2)) {
		t.Error("two events sharing a decision, with different costs, are equal")
	}
	if other := proto.Clone(decision).(*reinv1.Decision); !equalEvent(returned(decision, 1), returned(other, 1)) {
		t.Error("an event and one with a copy of its decision are not equal")
	}
	changed := proto.Clone(decision).(*reinv1.Decision)
	changed.GetToolCall().GetArguments().Fields["id"] = structpb.NewStringValue("INV-43")
	if equalEvent(returned(decision, 1), returned(changed, 1)) {
		t.Error("an event and one with a changed copy of its decision are equal")
	}
}

// TestDifferenceNamesTheField: for every event of TestEqualIsProtoEqual
// against each of its changed copies, difference names a field exactly
// when proto.Equal says they differ, and the field it names is one where
// go-cmp over protocmp finds a difference.
func TestDifferenceNamesTheField(t *testing.T) {
	named := 0
	for _, ev := range testEvents(t) {
		name := fmt.Sprintf("sequence %d (%s)", ev.GetSequence(), ev.GetActor())
		if got := difference(ev, proto.Clone(ev).(*reinv1.Event)); got != "" {
			t.Fatalf("%s: its copy differs at %q", name, got)
		}
		for _, m := range mutants(ev) {
			mev := m.msg.(*reinv1.Event)
			got := difference(ev, mev)
			if proto.Equal(ev, mev) {
				if got != "" {
					t.Errorf("%s, %s: proto.Equal, yet difference names %q", name, m.change, got)
				}
				continue
			}
			named++
			paths := cmpPaths(ev, mev)
			if got == "" || !coveredBy(got, paths) {
				t.Errorf("%s, %s: difference names %q; go-cmp finds differences at %q", name, m.change, got, paths)
			}
		}
	}
	if named < 1000 {
		t.Errorf("only %d differences were named", named)
	}
	// One field changed at depth: its full path.
	x := &reinv1.Event{Sequence: 4, Payload: &reinv1.Event_RunStarted{RunStarted: &reinv1.RunStarted{Contract: &reinv1.TaskContract{
		Tools: []*reinv1.ToolGrant{{Name: "get", Tier: reinv1.ToolTier_TOOL_TIER_READ}, {Name: "refund", Tier: reinv1.ToolTier_TOOL_TIER_WRITE}},
	}}}}
	y := proto.Clone(x).(*reinv1.Event)
	y.GetRunStarted().GetContract().GetTools()[1].Tier = reinv1.ToolTier_TOOL_TIER_READ
	y.RecordedAt = timestamppb.Now() // declared before the payload: named first
	if got, want := difference(x, y), "recorded_at"; got != want {
		t.Errorf("difference %q, want %q", got, want)
	}
	y.RecordedAt = nil
	if got, want := difference(x, y), "run_started.contract.tools[1].tier"; got != want {
		t.Errorf("difference %q, want %q", got, want)
	}
	if got := difference(x, nil); got != "" {
		t.Errorf("an event against none: difference %q, want none", got)
	}
}

// cmpPaths are the paths, in difference's form, where go-cmp finds x and y
// differ.
func cmpPaths(x, y *reinv1.Event) []string {
	var r pathReporter
	cmp.Equal(x, y, protocmp.Transform(), cmp.Reporter(&r))
	return r.diffs
}

type pathReporter struct {
	path  cmp.Path
	diffs []string
}

func (r *pathReporter) PushStep(ps cmp.PathStep) { r.path = append(r.path, ps) }
func (r *pathReporter) PopStep()                 { r.path = r.path[:len(r.path)-1] }

func (r *pathReporter) Report(rs cmp.Result) {
	if rs.Equal() {
		return
	}
	var b strings.Builder
	for i, step := range r.path {
		switch s := step.(type) {
		case cmp.MapIndex:
			if r.path[i-1].Type() == reflect.TypeFor[protocmp.Message]() {
				// protocmp keeps unknown fields under their number.
				if k := s.Key().String(); k != "" && strings.Trim(k, "0123456789") == "" {
					b.WriteString(".(unknown field " + k + ")")
				} else {
					b.WriteString("." + k)
				}
				continue
			}
			if s.Key().Kind() == reflect.String {
				fmt.Fprintf(&b, "[%q]", s.Key().String())
			} else {
				fmt.Fprintf(&b, "[%v]", s.Key())
			}
		case cmp.SliceIndex:
			// An element in one list only: go-cmp's alignment of equal
			// elements may place it anywhere.
			if ix, iy := s.SplitKeys(); ix < 0 || iy < 0 {
				b.WriteString("[?]")
			} else {
				fmt.Fprintf(&b, "[%d]", ix)
			}
		}
	}
	r.diffs = append(r.diffs, strings.TrimPrefix(b.String(), "."))
}

// coveredBy says whether path is one of paths, or the start of one of them
// (go-cmp went deeper), or one of them starts it (go-cmp stopped at a value
// as a whole). "[?]" in paths is any index.
func coveredBy(path string, paths []string) bool {
	segments := func(p string) []string {
		return strings.FieldsFunc(strings.ReplaceAll(p, "[", ".["), func(r rune) bool { return r == '.' })
	}
	mine := segments(path)
	for _, p := range paths {
		theirs := segments(p)
		n := min(len(mine), len(theirs))
		match := true
		for i := range n {
			if mine[i] != theirs[i] && !(theirs[i] == "[?]" && strings.HasPrefix(mine[i], "[")) {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

// TestEqualEdges checks the cases where proto.Equal is not ==.
func TestEqualEdges(t *testing.T) {
	negZero := math.Copysign(0, -1)
	returned := func(cost float64) *reinv1.Event {
		return &reinv1.Event{Payload: &reinv1.Event_ModelReturned{ModelReturned: &reinv1.ModelReturned{CostUsd: cost}}}
	}
	output := func(v *structpb.Value) *reinv1.Event {
		return &reinv1.Event{Payload: &reinv1.Event_ToolReturned{ToolReturned: &reinv1.ToolReturned{Output: v}}}
	}
	withUnknown := func(ev *reinv1.Event, raw ...byte) *reinv1.Event {
		ev.ProtoReflect().SetUnknown(raw)
		return ev
	}
	shared := &reinv1.Usage{InputTokens: 1}
	for _, tc := range []struct {
		name string
		x, y *reinv1.Event
	}{
		{"-0 and 0 in a field without presence", returned(negZero), returned(0)},
		{"-0 and -0", returned(negZero), returned(negZero)},
		{"NaN and NaN", returned(math.NaN()), returned(math.NaN())},
		{"NaN and 1", returned(math.NaN()), returned(1)},
		{"-0 and 0 in a Value", output(structpb.NewNumberValue(negZero)), output(structpb.NewNumberValue(0))},
		{"NaN and NaN in a Value", output(structpb.NewNumberValue(math.NaN())), output(structpb.NewNumberValue(math.NaN()))},
		{"no output and a null one", output(nil), output(structpb.NewNullValue())},
		{"an empty list and a nil one", output(structpb.NewListValue(&structpb.ListValue{})), output(structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{}}))},
		{"no payload and an empty one", &reinv1.Event{}, &reinv1.Event{Payload: &reinv1.Event_ModelReturned{}}},
		{"no usage and an empty one", &reinv1.Event{Payload: &reinv1.Event_ModelReturned{ModelReturned: &reinv1.ModelReturned{}}},
			&reinv1.Event{Payload: &reinv1.Event_ModelReturned{ModelReturned: &reinv1.ModelReturned{Usage: &reinv1.Usage{}}}}},
		{"one usage shared", &reinv1.Event{Payload: &reinv1.Event_ModelReturned{ModelReturned: &reinv1.ModelReturned{Usage: shared}}},
			&reinv1.Event{Payload: &reinv1.Event_ModelReturned{ModelReturned: &reinv1.ModelReturned{Usage: shared}}}},
		{"unknown fields in another order", withUnknown(&reinv1.Event{}, 0xf8, 0x01, 0x01, 0x80, 0x02, 0x02), withUnknown(&reinv1.Event{}, 0x80, 0x02, 0x02, 0xf8, 0x01, 0x01)},
		{"unknown fields and none", withUnknown(&reinv1.Event{}, 0xf8, 0x01, 0x01), &reinv1.Event{}},
		{"a nil event and an empty one", nil, &reinv1.Event{}},
		{"two nil events", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := proto.Equal(tc.x, tc.y)
			if got := equalEvent(tc.x, tc.y); got != want {
				t.Errorf("equal %v, proto.Equal %v", got, want)
			}
			if got := equalEvent(tc.y, tc.x); got != want {
				t.Errorf("swapped: equal %v, proto.Equal %v", got, want)
			}
		})
	}
}

// TestEqualDynamicMessages: a message known only by its descriptor (a
// dynamic one) is compared as proto.Equal compares it.
func TestEqualDynamicMessages(t *testing.T) {
	md := (&reinv1.Event{}).ProtoReflect().Descriptor()
	dyn := func(seq uint64) proto.Message {
		m := dynamicpb.NewMessage(md)
		m.Set(md.Fields().ByName("sequence"), protoreflect.ValueOfUint64(seq))
		return m
	}
	if !equal(dyn(1), dyn(1)) || equal(dyn(1), dyn(2)) {
		t.Error("dynamic messages compared wrongly")
	}
	// Of two types, proto.Equal decides (it compares their descriptors).
	if got, want := equal(dyn(1), &reinv1.Event{Sequence: 1}), proto.Equal(dyn(1), &reinv1.Event{Sequence: 1}); got != want {
		t.Errorf("a dynamic event and a generated one: equal %v, proto.Equal %v", got, want)
	}
}

// fullEvents is an event of every payload, with every field set.
func fullEvents(t *testing.T) []*reinv1.Event {
	t.Helper()
	ev := &reinv1.Event{}
	payload := ev.ProtoReflect().Descriptor().Oneofs().ByName("payload")
	var out []*reinv1.Event
	for i := range payload.Fields().Len() {
		fd := payload.Fields().Get(i)
		e := &reinv1.Event{RunId: "run_full", Sequence: uint64(i + 1), RecordedAt: timestamppb.Now(), Actor: "harness"}
		m := e.ProtoReflect()
		v := m.NewField(fd)
		fill(v.Message(), 0)
		m.Set(fd, v)
		out = append(out, e)
	}
	return out
}

// fill sets every field of m (the first member of each oneof) to a value
// that is not zero, to depth 3.
func fill(m protoreflect.Message, depth int) {
	if depth > 3 {
		return
	}
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if od := fd.ContainingOneof(); od != nil && m.WhichOneof(od) != nil {
			continue
		}
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			for range 2 {
				l.Append(element(fd, l.NewElement(), depth))
			}
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			for k := range 2 {
				mp.Set(mapKey(fd.MapKey(), k), element(fd.MapValue(), mp.NewValue(), depth))
			}
		case fd.Message() != nil:
			fill(m.Mutable(fd).Message(), depth+1)
		default:
			m.Set(fd, changed(fd, m.Get(fd)))
		}
	}
}

func element(fd protoreflect.FieldDescriptor, v protoreflect.Value, depth int) protoreflect.Value {
	if fd.Message() != nil {
		fill(v.Message(), depth+1)
		return v
	}
	// v, the new element's zero value: a repeated field has no default.
	return changed(fd, v)
}

func mapKey(fd protoreflect.FieldDescriptor, k int) protoreflect.MapKey {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(fmt.Sprintf("key%d", k)).MapKey()
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(k == 1).MapKey()
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(k + 7)).MapKey()
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(k + 7)).MapKey()
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(k + 7)).MapKey()
	default:
		return protoreflect.ValueOfInt64(int64(k + 7)).MapKey()
	}
}

// changed is a scalar value of fd's kind other than v.
func changed(fd protoreflect.FieldDescriptor, v protoreflect.Value) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(!v.Bool())
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(v.Enum() + 1)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(v.Int()) + 1)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(v.Int() + 1)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(v.Uint()) + 1)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(v.Uint() + 1)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(v.Float()) + 1.5)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(v.Float() + 1.5)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(v.String() + "x")
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes(append(append([]byte(nil), v.Bytes()...), 'x'))
	}
	panic("changed: kind " + fd.Kind().String())
}

// mutant is a copy of a message with one change.
type mutant struct {
	msg    proto.Message
	change string
}

// mutants are copies of root, each with one field changed: every field of
// every message in it set when unset, changed when set (a scalar), cleared
// (a message), grown (a list, a map); each element changed; unknown fields
// added to each message.
func mutants(root proto.Message) []mutant {
	var out []mutant
	edit := func(change string, at func(protoreflect.Message) protoreflect.Message, f func(protoreflect.Message)) {
		cp := proto.Clone(root)
		f(at(cp.ProtoReflect()))
		out = append(out, mutant{cp, change})
	}
	var walk func(path string, at func(protoreflect.Message) protoreflect.Message, m protoreflect.Message)
	walk = func(path string, at func(protoreflect.Message) protoreflect.Message, m protoreflect.Message) {
		edit(path+" + unknown field", at, func(m protoreflect.Message) {
			m.SetUnknown(append(m.GetUnknown(), 0xf8, 0xff, 0x03, 0x01))
		})
		fields := m.Descriptor().Fields()
		for i := range fields.Len() {
			fd := fields.Get(i)
			where := path + "." + string(fd.Name())
			switch {
			case fd.IsList():
				edit(where+" grown", at, func(m protoreflect.Message) {
					l := m.Mutable(fd).List()
					l.Append(element(fd, l.NewElement(), 3))
				})
				l := m.Get(fd).List()
				for j := range l.Len() {
					if fd.Message() != nil {
						walk(fmt.Sprintf("%s[%d]", where, j), func(r protoreflect.Message) protoreflect.Message {
							return at(r).Get(fd).List().Get(j).Message()
						}, l.Get(j).Message())
						continue
					}
					edit(fmt.Sprintf("%s[%d] changed", where, j), at, func(m protoreflect.Message) {
						l := m.Mutable(fd).List()
						l.Set(j, changed(fd, l.Get(j)))
					})
				}
			case fd.IsMap():
				edit(where+" grown", at, func(m protoreflect.Message) {
					mp := m.Mutable(fd).Map()
					mp.Set(mapKey(fd.MapKey(), 99), element(fd.MapValue(), mp.NewValue(), 3))
				})
				m.Get(fd).Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
					if fd.MapValue().Message() != nil {
						walk(fmt.Sprintf("%s[%v]", where, k), func(r protoreflect.Message) protoreflect.Message {
							return at(r).Get(fd).Map().Get(k).Message()
						}, v.Message())
					}
					return true
				})
			case fd.Message() != nil && m.Has(fd):
				edit(where+" cleared", at, func(m protoreflect.Message) { m.Clear(fd) })
				walk(where, func(r protoreflect.Message) protoreflect.Message { return at(r).Mutable(fd).Message() }, m.Get(fd).Message())
			case fd.Message() != nil:
				edit(where+" set empty", at, func(m protoreflect.Message) { m.Set(fd, m.NewField(fd)) })
			default:
				edit(where+" changed", at, func(m protoreflect.Message) { m.Set(fd, changed(fd, m.Get(fd))) })
				if m.Has(fd) {
					edit(where+" cleared", at, func(m protoreflect.Message) { m.Clear(fd) })
				}
			}
		}
	}
	walk("event", func(m protoreflect.Message) protoreflect.Message { return m }, root.ProtoReflect())
	return out
}
