package replay

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// TestEqualIsProtoEqual holds equal to proto.Equal on every recorded event
// and on a full event of every payload, each against a copy of itself and
// against every copy with one field changed: set when it was unset, changed
// or cleared when it was set, at any depth, and with unknown fields added.
func TestEqualIsProtoEqual(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(recordings, "*.rein"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no recordings in %s (%v)", recordings, err)
	}
	var events []*reinv1.Event
	for _, f := range files {
		events = append(events, readExport(t, f).GetEvents()...)
	}
	events = append(events, fullEvents(t)...)
	mutated := 0
	for _, ev := range events {
		name := fmt.Sprintf("sequence %d (%s)", ev.GetSequence(), ev.GetActor())
		if cp := proto.Clone(ev).(*reinv1.Event); !equalEvent(ev, cp) || !equal(ev, cp) {
			t.Fatalf("%s: not equal to its copy", name)
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

// TestEqualLeavesOpaqueTypesToProtoEqual: a message whose Go struct does
// not show its fields (here a dynamic one) is compared by proto.Equal.
func TestEqualLeavesOpaqueTypesToProtoEqual(t *testing.T) {
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
	return changed(fd, fd.Default())
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
