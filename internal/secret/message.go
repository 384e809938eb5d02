package secret

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Message is m with every string in it redacted (string fields, repeated
// and map ones, map keys, and the same within every message it holds, so a
// google.protobuf.Struct or Value too): m itself when it holds no secret,
// else a redacted copy. m is never modified: a tool's output may be shared
// (a fixture's, returned to every run that calls it).
func Message[M proto.Message](r *Redactor, m M) M {
	if r == nil || !m.ProtoReflect().IsValid() || !r.message(m.ProtoReflect(), false) {
		return m
	}
	c := proto.CloneOf(m)
	r.message(c.ProtoReflect(), true)
	return c
}

// message reports whether m holds a secret in one of its strings; with
// write it also redacts them in place (and looks at every string, where
// without it stops at the first that holds one).
func (r *Redactor) message(m protoreflect.Message, write bool) bool {
	found := false
	var edits []func()
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				if nv, ok := r.value(fd, l.Get(i), write); ok {
					found = true
					edits = append(edits, func() { l.Set(i, nv) })
				}
			}
		case fd.IsMap():
			mp := v.Map()
			mp.Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				nv, ok := r.value(fd.MapValue(), mv, write)
				keyed := fd.MapKey().Kind() == protoreflect.StringKind && r.Holds(k.String())
				if ok || keyed {
					found = true
					edits = append(edits, func() {
						if keyed {
							mp.Clear(k)
							k = protoreflect.ValueOfString(r.Redact(k.String())).MapKey()
						}
						mp.Set(k, nv)
					})
				}
				return write || !found
			})
		default:
			if nv, ok := r.value(fd, v, write); ok {
				found = true
				edits = append(edits, func() { m.Set(fd, nv) })
			}
		}
		return write || !found
	})
	if write {
		// After the walk: a message is not changed while it is ranged over.
		for _, edit := range edits {
			edit()
		}
	}
	return found
}

// value reports whether v, of field fd, holds a secret, and the value to
// set in its place (v itself for a message, which was redacted in place).
func (r *Redactor) value(fd protoreflect.FieldDescriptor, v protoreflect.Value, write bool) (protoreflect.Value, bool) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		if s := v.String(); r.Holds(s) {
			return protoreflect.ValueOfString(r.Redact(s)), true
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if r.message(v.Message(), write) {
			return v, true
		}
	}
	return v, false
}
