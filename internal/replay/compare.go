package replay

import (
	"bytes"
	"math"
	"reflect"
	"strings"
	"sync"
	"unsafe"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// equal is proto.Equal(x, y), the comparison of a replayed event with the
// recorded one, made cheap enough to run on every event.
//
// proto.Equal walks both messages through protoreflect, at the cost of a
// reflect lookup or an allocation for nearly every field, and walks even
// sub-messages that are one pointer: a replay passes many of the
// recording's own messages through the harness (a model's decision, a
// tool's output), so a replayed event often shares them with the recorded
// one. equal reads the generated Go structs directly, at offsets found once
// per message type with reflect (a plan), with proto.Equal's rules:
//
//   - two pointers to the same message are equal; a nil message equals only
//     a nil message;
//   - scalars are equal with ==, floats with NaN equal to NaN; a field
//     without presence (proto3) is unset when zero, so -0 and 0 differ there
//     (proto.Equal sees -0 as set) but not in a oneof, a list or a map;
//   - bytes, lists and maps are equal by length and element, nil and empty
//     alike; a oneof is equal when the same member is set to equal values;
//   - unknown fields are equal when their bytes are (otherwise proto.Equal
//     decides: it allows them in another order).
//
// google.protobuf.Struct, Value and ListValue are compared as the Go values
// they are. A message type whose struct does not show every field of its
// descriptor as an exported field of a kind equal knows (an opaque API,
// say) gets no plan and is left to proto.Equal, so a field equal cannot see
// is never skipped. The tests hold equal to proto.Equal on every recorded
// event and on each of them changed, field by field.
func equal(x, y proto.Message) bool {
	vx, vy := reflect.ValueOf(x), reflect.ValueOf(y)
	if vx.Type() != vy.Type() || vx.Kind() != reflect.Pointer {
		return proto.Equal(x, y)
	}
	return planOf(vx.Type()).equal(vx.UnsafePointer(), vy.UnsafePointer())
}

// equalEvent is equal for two events.
func equalEvent(x, y *reinv1.Event) bool {
	return eventPlan().equal(unsafe.Pointer(x), unsafe.Pointer(y))
}

var eventPlan = sync.OnceValue(func() *plan { return planOf(reflect.TypeFor[*reinv1.Event]()) })

// plan is how equal reads one message type.
type plan struct {
	typ reflect.Type // the message's pointer type
	// ok is false for a type equal cannot read: proto.Equal compares it.
	ok     bool
	fields []planField
	// unknown is the offset of the unknown fields (a []byte) when hasUnknown.
	unknown    uintptr
	hasUnknown bool
	pb         pbKind
}

type pbKind uint8

const (
	pbNone pbKind = iota
	pbValue
	pbStruct
	pbList
)

// planField is one struct field: a proto field, or a whole oneof.
type planField struct {
	off  uintptr
	kind fieldKind
	typ  reflect.Type // the field's Go type
	// sub is the plan of a message field, or of a list's messages.
	sub *plan
	// elem is the kind of a list's elements or an optional scalar's value.
	elem fieldKind
	// members are a oneof's members: the wrapper's one field, at offset 0
	// of the wrapper, by the type word of an interface that holds it.
	members []member
}

type member struct {
	typeWord unsafe.Pointer
	field    planField
}

type fieldKind uint8

const (
	kindString   fieldKind = iota + 1
	kindBool               // bool
	kind32                 // int32, uint32, enums
	kind64                 // int64, uint64
	kindFloat32            // float32
	kindFloat64            // float64
	kindBytes              // []byte
	kindMessage            // *M
	kindOptional           // *scalar: a proto3 optional scalar
	kindOneof              // an interface holding a *Wrapper
	kindList               // []T
	kindMap                // map[K]V, compared through reflect
)

// equal compares the messages at x and y, pointers to p's struct.
func (p *plan) equal(x, y unsafe.Pointer) bool {
	if x == y {
		return true
	}
	if x == nil || y == nil {
		return false
	}
	switch {
	case !p.ok:
		return proto.Equal(p.message(x), p.message(y))
	case p.pb == pbValue:
		return equalPBValue((*structpb.Value)(x), (*structpb.Value)(y))
	case p.pb == pbStruct:
		return equalPBStruct((*structpb.Struct)(x), (*structpb.Struct)(y))
	case p.pb == pbList:
		return equalPBList((*structpb.ListValue)(x), (*structpb.ListValue)(y))
	}
	for i := range p.fields {
		f := &p.fields[i]
		if !f.equal(unsafe.Add(x, f.off), unsafe.Add(y, f.off), false) {
			return false
		}
	}
	ux := *(*[]byte)(unsafe.Add(x, p.unknown))
	uy := *(*[]byte)(unsafe.Add(y, p.unknown))
	if len(ux) == 0 && len(uy) == 0 || bytes.Equal(ux, uy) {
		return true
	}
	return proto.Equal(p.message(x), p.message(y))
}

// message is the message at x, a pointer to p's struct.
func (p *plan) message(x unsafe.Pointer) proto.Message {
	return reflect.NewAt(p.typ.Elem(), x).Interface().(proto.Message)
}

// equal compares the field values at x and y. present is true where a value
// is set whatever it is (a oneof member, an element, an optional's value);
// false for a field without presence, unset when zero.
func (f *planField) equal(x, y unsafe.Pointer, present bool) bool {
	switch f.kind {
	case kindString:
		return *(*string)(x) == *(*string)(y)
	case kindBool:
		return *(*bool)(x) == *(*bool)(y)
	case kind32:
		return *(*uint32)(x) == *(*uint32)(y)
	case kind64:
		return *(*uint64)(x) == *(*uint64)(y)
	case kindFloat32:
		fx, fy := *(*float32)(x), *(*float32)(y)
		if !present && (math.Float32bits(fx) != 0) != (math.Float32bits(fy) != 0) {
			return false
		}
		return equalFloat(float64(fx), float64(fy))
	case kindFloat64:
		fx, fy := *(*float64)(x), *(*float64)(y)
		if !present && (math.Float64bits(fx) != 0) != (math.Float64bits(fy) != 0) {
			return false
		}
		return equalFloat(fx, fy)
	case kindBytes:
		return bytes.Equal(*(*[]byte)(x), *(*[]byte)(y))
	case kindMessage:
		return f.sub.equal(*(*unsafe.Pointer)(x), *(*unsafe.Pointer)(y))
	case kindOptional:
		px, py := *(*unsafe.Pointer)(x), *(*unsafe.Pointer)(y)
		if px == nil || py == nil {
			return px == py
		}
		e := planField{kind: f.elem}
		return e.equal(px, py, true)
	case kindOneof:
		// An interface is its type word and a pointer to the wrapper.
		ix, iy := (*[2]unsafe.Pointer)(x), (*[2]unsafe.Pointer)(y)
		switch {
		case ix[0] != iy[0]:
			return false // different members, or one unset
		case ix[0] == nil || ix[1] == iy[1]:
			return true
		}
		for i := range f.members {
			if m := &f.members[i]; m.typeWord == ix[0] {
				return m.field.equal(ix[1], iy[1], true)
			}
		}
		// A member the plan does not know (not made by this binary's
		// generated code): through reflect.
		wx := reflect.NewAt(f.typ, x).Elem().Elem().Elem().Field(0)
		wy := reflect.NewAt(f.typ, y).Elem().Elem().Elem().Field(0)
		return equalReflect(wx, wy)
	case kindList:
		return f.equalList(x, y)
	case kindMap:
		return f.equalMap(reflect.NewAt(f.typ, x).Elem(), reflect.NewAt(f.typ, y).Elem())
	}
	panic("replay: equal: unknown field kind")
}

func (f *planField) equalList(x, y unsafe.Pointer) bool {
	switch f.elem {
	case kindMessage:
		lx, ly := *(*[]unsafe.Pointer)(x), *(*[]unsafe.Pointer)(y)
		if len(lx) != len(ly) {
			return false
		}
		for i := range lx {
			if !f.sub.equal(lx[i], ly[i]) {
				return false
			}
		}
		return true
	case kindString:
		lx, ly := *(*[]string)(x), *(*[]string)(y)
		if len(lx) != len(ly) {
			return false
		}
		for i := range lx {
			if lx[i] != ly[i] {
				return false
			}
		}
		return true
	}
	// Other lists are rare: through reflect.
	vx, vy := reflect.NewAt(f.typ, x).Elem(), reflect.NewAt(f.typ, y).Elem()
	if vx.Len() != vy.Len() {
		return false
	}
	for i := range vx.Len() {
		if !equalReflect(vx.Index(i), vy.Index(i)) {
			return false
		}
	}
	return true
}

func (f *planField) equalMap(x, y reflect.Value) bool {
	if x.Len() != y.Len() {
		return false
	}
	for it := x.MapRange(); it.Next(); {
		vy := y.MapIndex(it.Key())
		if !vy.IsValid() || !equalReflect(it.Value(), vy) {
			return false
		}
	}
	return true
}

// equalReflect compares two values that are present (a list's element, a
// map's value, a oneof member's): a scalar, bytes or a message.
func equalReflect(x, y reflect.Value) bool {
	switch x.Kind() {
	case reflect.Float32, reflect.Float64:
		return equalFloat(x.Float(), y.Float())
	case reflect.Slice: // bytes
		return bytes.Equal(x.Bytes(), y.Bytes())
	case reflect.Pointer:
		if x.Type().Elem().Kind() == reflect.Struct { // a message
			return planOf(x.Type()).equal(x.UnsafePointer(), y.UnsafePointer())
		}
		if x.IsNil() || y.IsNil() {
			return x.IsNil() == y.IsNil()
		}
		return equalReflect(x.Elem(), y.Elem())
	}
	return x.Equal(y) // bool, integers, enums, strings
}

// equalFloat is proto.Equal's: NaN equals NaN.
func equalFloat(x, y float64) bool {
	if math.IsNaN(x) || math.IsNaN(y) {
		return math.IsNaN(x) && math.IsNaN(y)
	}
	return x == y
}

// equalUnknown compares the unknown fields of two messages of one type.
func equalUnknown(x, y proto.Message) bool {
	ux, uy := x.ProtoReflect().GetUnknown(), y.ProtoReflect().GetUnknown()
	if len(ux) == 0 && len(uy) == 0 || bytes.Equal(ux, uy) {
		return true
	}
	return proto.Equal(x, y)
}

func equalPBValue(x, y *structpb.Value) bool {
	if x == y {
		return true
	}
	if x == nil || y == nil || !equalUnknown(x, y) {
		return false
	}
	switch kx := x.GetKind().(type) {
	case nil:
		return y.GetKind() == nil
	case *structpb.Value_NullValue:
		ky, ok := y.GetKind().(*structpb.Value_NullValue)
		return ok && kx.NullValue == ky.NullValue
	case *structpb.Value_NumberValue:
		ky, ok := y.GetKind().(*structpb.Value_NumberValue)
		return ok && equalFloat(kx.NumberValue, ky.NumberValue)
	case *structpb.Value_StringValue:
		ky, ok := y.GetKind().(*structpb.Value_StringValue)
		return ok && kx.StringValue == ky.StringValue
	case *structpb.Value_BoolValue:
		ky, ok := y.GetKind().(*structpb.Value_BoolValue)
		return ok && kx.BoolValue == ky.BoolValue
	case *structpb.Value_StructValue:
		ky, ok := y.GetKind().(*structpb.Value_StructValue)
		return ok && equalPBStruct(kx.StructValue, ky.StructValue)
	case *structpb.Value_ListValue:
		ky, ok := y.GetKind().(*structpb.Value_ListValue)
		return ok && equalPBList(kx.ListValue, ky.ListValue)
	}
	return proto.Equal(x, y) // a kind added to Value
}

func equalPBStruct(x, y *structpb.Struct) bool {
	if x == y {
		return true
	}
	if x == nil || y == nil || len(x.GetFields()) != len(y.GetFields()) || !equalUnknown(x, y) {
		return false
	}
	for k, vx := range x.GetFields() {
		vy, ok := y.GetFields()[k]
		if !ok || !equalPBValue(vx, vy) {
			return false
		}
	}
	return true
}

func equalPBList(x, y *structpb.ListValue) bool {
	if x == y {
		return true
	}
	if x == nil || y == nil || len(x.GetValues()) != len(y.GetValues()) || !equalUnknown(x, y) {
		return false
	}
	for i, vx := range x.GetValues() {
		if !equalPBValue(vx, y.GetValues()[i]) {
			return false
		}
	}
	return true
}

// plans holds every plan made, by message pointer type. A plan refers to
// the plans of the messages it holds, so a comparison looks up only the
// outermost type.
var plans struct {
	sync.Mutex // held while plans are made
	m          sync.Map
}

// planOf is the plan of t, a pointer to a generated message struct.
func planOf(t reflect.Type) *plan {
	if p, ok := plans.m.Load(t); ok {
		return p.(*plan)
	}
	plans.Lock()
	defer plans.Unlock()
	making := map[reflect.Type]*plan{}
	p := makePlan(t, making)
	for t, p := range making {
		plans.m.Store(t, p)
	}
	return p
}

// makePlan makes the plan of t and of the message types it holds, into
// making, which also lets a type that holds itself refer to its own plan.
// plans must be locked.
func makePlan(t reflect.Type, making map[reflect.Type]*plan) *plan {
	if p, ok := plans.m.Load(t); ok {
		return p.(*plan)
	}
	if p, ok := making[t]; ok {
		return p
	}
	p := &plan{typ: t}
	making[t] = p
	if p.ok = p.fill(t, making); !p.ok {
		p.fields, p.pb, p.hasUnknown = nil, pbNone, false
	}
	return p
}

// fill makes p the plan of t; false when equal cannot read t's struct.
func (p *plan) fill(t reflect.Type, making map[reflect.Type]*plan) (ok bool) {
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct || !t.Implements(messageType) {
		return false
	}
	// A message type that is not generated code may not describe a zero
	// value of itself, or not at all: it gets no plan.
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	md := reflect.New(t.Elem()).Interface().(proto.Message).ProtoReflect().Descriptor()
	if md == nil {
		return false
	}
	switch md.FullName() {
	case "google.protobuf.Value":
		p.pb = pbValue
		return true
	case "google.protobuf.Struct":
		p.pb = pbStruct
		return true
	case "google.protobuf.ListValue":
		p.pb = pbList
		return true
	}
	if md.ExtensionRanges().Len() > 0 {
		return false // extensions live outside the struct's fields
	}
	st := t.Elem()
	names := map[string]bool{}  // proto field names held by a struct field
	oneofs := map[string]bool{} // oneof names held by an interface field
	for i := range st.NumField() {
		sf := st.Field(i)
		if !sf.IsExported() {
			if sf.Name == "unknownFields" && sf.Type.Kind() == reflect.Slice && sf.Type.Elem().Kind() == reflect.Uint8 {
				p.unknown, p.hasUnknown = sf.Offset, true
			}
			continue
		}
		if name, ok := sf.Tag.Lookup("protobuf_oneof"); ok {
			f, ok := oneofPlan(t, i, md.Oneofs().ByName(protoreflect.Name(name)), making)
			if !ok {
				return false
			}
			oneofs[name] = true
			p.fields = append(p.fields, f)
			continue
		}
		tag, ok := sf.Tag.Lookup("protobuf")
		if !ok {
			return false
		}
		f, ok := fieldPlan(sf.Type, making)
		if !ok {
			return false
		}
		f.off = sf.Offset
		for _, part := range strings.Split(tag, ",") {
			if name, ok := strings.CutPrefix(part, "name="); ok {
				names[name] = true
			}
		}
		p.fields = append(p.fields, f)
	}
	if !p.hasUnknown {
		return false
	}
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			if !oneofs[string(od.Name())] {
				return false
			}
		} else if !names[string(fd.Name())] {
			return false
		}
	}
	return true
}

// fieldPlan is how to read a struct field of type t; false when equal
// cannot.
func fieldPlan(t reflect.Type, making map[reflect.Type]*plan) (planField, bool) {
	f := planField{typ: t}
	switch t.Kind() {
	case reflect.String:
		f.kind = kindString
	case reflect.Bool:
		f.kind = kindBool
	case reflect.Int32, reflect.Uint32:
		f.kind = kind32
	case reflect.Int64, reflect.Uint64:
		f.kind = kind64
	case reflect.Float32:
		f.kind = kindFloat32
	case reflect.Float64:
		f.kind = kindFloat64
	case reflect.Pointer:
		if t.Elem().Kind() == reflect.Struct {
			if !t.Implements(messageType) {
				return f, false
			}
			f.kind, f.sub = kindMessage, makePlan(t, making)
			break
		}
		e, ok := fieldPlan(t.Elem(), making)
		if !ok || e.kind > kindFloat64 {
			return f, false
		}
		f.kind, f.elem = kindOptional, e.kind
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			f.kind = kindBytes
			break
		}
		e, ok := fieldPlan(t.Elem(), making)
		if !ok || e.kind > kindMessage {
			return f, false
		}
		f.kind, f.elem, f.sub = kindList, e.kind, e.sub
	case reflect.Map:
		e, ok := fieldPlan(t.Elem(), making)
		if !ok || e.kind > kindMessage {
			return f, false
		}
		f.kind = kindMap
	default:
		return f, false
	}
	return f, true
}

// oneofPlan is the plan of struct field i of t's struct, which holds the
// oneof od: its members by the type word an interface holding each has.
func oneofPlan(t reflect.Type, i int, od protoreflect.OneofDescriptor, making map[reflect.Type]*plan) (planField, bool) {
	sf := t.Elem().Field(i)
	f := planField{off: sf.Offset, kind: kindOneof, typ: sf.Type}
	if od == nil || sf.Type.Kind() != reflect.Interface {
		return f, false
	}
	for j := range od.Fields().Len() {
		// Set the member on a new message, and read what the field holds.
		v := reflect.New(t.Elem())
		m := v.Interface().(proto.Message).ProtoReflect()
		fd := od.Fields().Get(j)
		m.Set(fd, m.NewField(fd))
		held := v.Elem().Field(i)
		if held.IsNil() {
			return f, false
		}
		w := held.Elem().Type()
		if w.Kind() != reflect.Pointer || w.Elem().Kind() != reflect.Struct || w.Elem().NumField() != 1 || w.Elem().Field(0).Offset != 0 {
			return f, false
		}
		mf, ok := fieldPlan(w.Elem().Field(0).Type, making)
		if !ok {
			return f, false
		}
		typeWord := (*[2]unsafe.Pointer)(held.Addr().UnsafePointer())[0]
		f.members = append(f.members, member{typeWord, mf})
	}
	return f, true
}

var messageType = reflect.TypeFor[protoreflect.ProtoMessage]()
