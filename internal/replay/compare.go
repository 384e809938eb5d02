package replay

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// equalEvent says whether a replayed event is the recorded one:
// proto.Equal(x, y), decided fast enough to run on every event.
//
// proto.Equal walks both messages through protoreflect, at the cost of a
// lookup or an allocation for nearly every field, and walks even the
// sub-messages both events hold: a replay passes many of the recording's
// own messages through the harness (a model's decision, a tool's output,
// the contract's script), so a replayed event often shares them with the
// recorded one. So equalEvent first asks the generated comparison
// (equal_gen.go, written from the descriptors by TestEqualCodeIsCurrent):
// plain Go over the generated types' getters, oneof wrappers and optional
// fields, which takes two messages at one address as equal and is true only
// when proto.Equal is. It answers false for some equal messages (floats
// compared by their bits, so -0 and 0, or two NaNs of other bits; unknown
// fields in another order; a nil list element against an empty one), and
// then proto.Equal decides. When equal_gen.go does not match the
// descriptors this binary holds (a proto changed since it was generated),
// it is not used at all: proto.Equal decides every event.
func equalEvent(x, y *reinv1.Event) bool {
	if x == nil || y == nil {
		return x == y // a nil message equals only a nil message
	}
	if generatedEqualOK() && eqEvent(x, y) {
		return true
	}
	return proto.Equal(x, y)
}

// equal is equalEvent for two messages of any type.
func equal(x, y proto.Message) bool {
	ex, okx := x.(*reinv1.Event)
	ey, oky := y.(*reinv1.Event)
	if okx && oky {
		return equalEvent(ex, ey)
	}
	return proto.Equal(x, y)
}

// generatedEqualOK says whether equal_gen.go was generated for the
// messages this binary holds.
var generatedEqualOK = sync.OnceValue(func() bool { return shapesMatch(equalShapes) })

// shapesMatch says whether every message named in shapes has that shape.
func shapesMatch(shapes map[string]string) bool {
	for name, want := range shapes {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
		md, ok := d.(protoreflect.MessageDescriptor)
		if err != nil || !ok || shape(md) != want {
			return false
		}
	}
	return true
}

// shape is what the generated comparison of md depends on: each field's
// number, name, kind, cardinality, presence, oneof, and the types it holds.
func shape(md protoreflect.MessageDescriptor) string {
	var b strings.Builder
	if md.ExtensionRanges().Len() > 0 {
		b.WriteString("extensions; ")
	}
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		fmt.Fprintf(&b, "%d %s %v %v", fd.Number(), fd.Name(), fd.Kind(), fd.Cardinality())
		if fd.HasPresence() {
			b.WriteString(" presence")
		}
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			b.WriteString(" oneof " + string(od.Name()))
		}
		if fd.IsMap() {
			fmt.Fprintf(&b, " map %v %v", fd.MapKey().Kind(), fd.MapValue().Kind())
			if m := fd.MapValue().Message(); m != nil {
				b.WriteString(" " + string(m.FullName()))
			}
		} else if m := fd.Message(); m != nil {
			b.WriteString(" " + string(m.FullName()))
		}
		b.WriteString("; ")
	}
	return b.String()
}

// difference names the first field where the recorded event x and the
// replayed event y differ, in the order their messages declare their
// fields, as a path from the event: "model_requested.input_hash",
// "run_started.contract.tools[1].tier", "tool_returned.output.string_value",
// `blobs["ab12"]`. A field set in one event only is named too (for a oneof,
// the member set first in declaration order); "(unknown field N)" ends the
// path when only fields this rein does not know differ. It is "" when the
// events are equal (equalEvent).
//
// It runs once per divergence, so it walks every declared field and is in
// no hurry.
func difference(x, y *reinv1.Event) string {
	if equalEvent(x, y) {
		return ""
	}
	if x == nil || y == nil {
		return "" // an event against none: no field to name
	}
	path := diffMessage(x.ProtoReflect(), y.ProtoReflect())
	return strings.TrimPrefix(strings.Join(path, ""), ".")
}

// diffMessage is the path to the first difference of two unequal messages
// of one type, as steps (".name", "[i]", "[key]").
func diffMessage(mx, my protoreflect.Message) []string {
	if mx.Descriptor() != my.Descriptor() {
		return []string{"(message type)"}
	}
	fields := mx.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		hx, hy := mx.Has(fd), my.Has(fd)
		if !hx && !hy {
			continue
		}
		step := "." + string(fd.Name())
		if hx != hy {
			return []string{step}
		}
		if sub := diffValue(fd, mx.Get(fd), my.Get(fd)); sub != nil {
			return append([]string{step}, sub...)
		}
	}
	return []string{fmt.Sprintf(".(unknown field %d)", firstUnknown(mx.GetUnknown(), my.GetUnknown()))}
}

// firstUnknown is the lowest field number whose unknown fields differ in x
// and y, each number's taken together in order as proto.Equal takes them.
func firstUnknown(x, y protoreflect.RawFields) protowire.Number {
	group := func(b protoreflect.RawFields) map[protowire.Number]string {
		m := map[protowire.Number]string{}
		for len(b) > 0 {
			num, _, n := protowire.ConsumeField(b)
			if n < 0 {
				break // malformed: what is left is no field
			}
			m[num] += string(b[:n])
			b = b[n:]
		}
		return m
	}
	gx, gy := group(x), group(y)
	var first protowire.Number
	for _, g := range []map[protowire.Number]string{gx, gy} {
		for num := range g {
			if gx[num] != gy[num] && (first == 0 || num < first) {
				first = num
			}
		}
	}
	return first
}

// diffValue is the path within field fd to where vx and vy differ: empty
// (not nil) when they differ as a whole, nil when they are equal.
func diffValue(fd protoreflect.FieldDescriptor, vx, vy protoreflect.Value) []string {
	switch {
	case fd.IsList():
		lx, ly := vx.List(), vy.List()
		for i := range min(lx.Len(), ly.Len()) {
			if sub := diffElem(fd, lx.Get(i), ly.Get(i)); sub != nil {
				return append([]string{fmt.Sprintf("[%d]", i)}, sub...)
			}
		}
		if lx.Len() != ly.Len() {
			return []string{fmt.Sprintf("[%d]", min(lx.Len(), ly.Len()))}
		}
		return nil
	case fd.IsMap():
		mx, my := vx.Map(), vy.Map()
		var keys []protoreflect.MapKey
		for _, m := range []protoreflect.Map{mx, my} {
			m.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
				keys = append(keys, k)
				return true
			})
		}
		slices.SortFunc(keys, compareKeys)
		keys = slices.CompactFunc(keys, func(a, b protoreflect.MapKey) bool { return compareKeys(a, b) == 0 })
		for _, k := range keys {
			step := fmt.Sprintf("[%s]", keyText(k))
			if !mx.Has(k) || !my.Has(k) {
				return []string{step}
			}
			if sub := diffElem(fd.MapValue(), mx.Get(k), my.Get(k)); sub != nil {
				return append([]string{step}, sub...)
			}
		}
		return nil
	}
	return diffElem(fd, vx, vy)
}

// diffElem is diffValue for one value of fd's kind: a list's element, a
// map's value, a singular field.
func diffElem(fd protoreflect.FieldDescriptor, vx, vy protoreflect.Value) []string {
	if fd.Message() != nil {
		x, y := vx.Message(), vy.Message()
		if equal(x.Interface(), y.Interface()) {
			return nil
		}
		return diffMessage(x, y)
	}
	if vx.Equal(vy) {
		return nil
	}
	return []string{}
}

func keyText(k protoreflect.MapKey) string {
	if s, ok := k.Interface().(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return k.String()
}

// compareKeys orders map keys of one kind.
func compareKeys(a, b protoreflect.MapKey) int {
	switch a.Interface().(type) {
	case string:
		return strings.Compare(a.String(), b.String())
	case bool:
		return cmp.Compare(boolInt(a.Bool()), boolInt(b.Bool()))
	case int32, int64:
		return cmp.Compare(a.Int(), b.Int())
	}
	return cmp.Compare(a.Uint(), b.Uint())
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
