package reqlimit

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// What decoding allocates, by estimate: each message (a map entry too) its
// struct, of perMessage bytes and perField more for each field (a oneof
// counts as one), and the slot that holds it; each field its slot, string
// header or oneof wrapper, of perField bytes; each map entry perMapEntry
// more; each element of a packed list its slot; each byte of a string or of an unknown field itself (an
// unknown field's bytes are appended, so twice). The figures are above
// what Go's protobuf allocates for the costliest shapes, a long list of
// empty messages among them (estimate_test.go holds them to it).
const (
	perMessage = 64
	perField   = 24
	perElement = 8
	// perMapEntry is what a map's entry costs besides a message's: its
	// share of the map's buckets, which grow by doubling.
	perMapEntry = 64
	// maxDepth is how deep the estimate follows nested messages; below
	// it a message's bytes count as unknown bytes. Protobuf refuses
	// messages nested past 10,000 levels.
	maxDepth = 10000
)

// Estimate is what decoding wire into a message of type md would allocate,
// about, in bytes. It reads wire once and allocates nothing. A malformed
// message counts its remaining bytes as unknown ones: decoding it fails,
// after allocating at most that.
func Estimate(md protoreflect.MessageDescriptor, wire []byte) int64 {
	return structBytes(md) + scan(md, wire, 0)
}

// structBytes is what one message of type md costs before its fields'
// contents.
func structBytes(md protoreflect.MessageDescriptor) int64 {
	slots := md.Fields().Len()
	oneofs := md.Oneofs()
	for i := range oneofs.Len() {
		slots -= oneofs.Get(i).Fields().Len() - 1
	}
	return perMessage + perField*int64(slots)
}

func scan(md protoreflect.MessageDescriptor, b []byte, depth int) int64 {
	var n int64
	for len(b) > 0 {
		num, typ, tagLen := protowire.ConsumeTag(b)
		if tagLen < 0 {
			return n + unknown(len(b))
		}
		valLen := protowire.ConsumeFieldValue(num, typ, b[tagLen:])
		if valLen < 0 {
			return n + unknown(len(b))
		}
		field := b[:tagLen+valLen]
		b = b[tagLen+valLen:]
		fd := md.Fields().ByNumber(num)
		if fd == nil || typ != protowire.BytesType {
			if fd == nil || typ == protowire.StartGroupType {
				n += unknown(len(field))
			} else {
				n += perField
			}
			continue
		}
		v, _ := protowire.ConsumeBytes(field[tagLen:])
		switch k := fd.Kind(); {
		case k == protoreflect.MessageKind && depth < maxDepth:
			n += perField + structBytes(fd.Message()) + scan(fd.Message(), v, depth+1)
			if fd.IsMap() {
				n += perMapEntry
			}
		case k == protoreflect.StringKind || k == protoreflect.BytesKind:
			n += perField + int64(len(v))
		case fd.IsList() && k != protoreflect.MessageKind && k != protoreflect.GroupKind:
			n += perField + perElement*packed(k, v)
		default:
			// Too deep, or not the field's wire type: kept as unknown.
			n += unknown(len(field))
		}
	}
	return n
}

// unknown is what n bytes kept as unknown fields cost.
func unknown(n int) int64 { return perField + 2*int64(n) }

// packed is how many elements a packed list of kind k holds in v.
func packed(k protoreflect.Kind, v []byte) int64 {
	switch k {
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		return int64(len(v)/4) + 1
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		return int64(len(v)/8) + 1
	}
	// A varint ends at each byte below 0x80.
	var count int64
	for _, c := range v {
		if c < 0x80 {
			count++
		}
	}
	return count + 1
}

// What decoding JSON allocates, by estimate: the message decoded, the
// protobuf it is transcoded into, and the decoder's own tokens, each JSON
// value perJSONValue bytes (a member of an object as two, its key and its
// value), each byte of the text twice, and jsonBytes for the
// decoder. A member of a typed message costs far less than one of a
// google.protobuf.Struct, which the estimate cannot tell apart.
const (
	perJSONValue = 192
	jsonBytes    = 4 << 10
)

// EstimateJSON is what decoding text as a request's JSON, and
// transcoding it to protobuf, would allocate, about, in bytes. It counts
// the values in text (at most one for each opening bracket, comma and
// colon outside strings, and one more) without parsing it.
func EstimateJSON(text []byte) int64 {
	values := int64(1)
	inString, escaped := false, false
	for _, c := range text {
		switch {
		case escaped:
			escaped = false
		case inString:
			switch c {
			case '\\':
				escaped = true
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[' || c == ',' || c == ':':
			values++
		}
	}
	return jsonBytes + perJSONValue*values + 2*int64(len(text))
}
