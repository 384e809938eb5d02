// Package seal is how rein's store backends seal what they store (an
// event, a snapshot, a contract): a 6-byte header, then the message's
// protobuf encoding.
//
//	byte 0     0x00, the seal's marker (no protobuf encoding of a
//	           non-empty message starts with it: field 0 does not exist)
//	byte 1     the seal's version, V1
//	bytes 2–5  CRC-32C (Castagnoli) of the encoding, big-endian
//
// What a backend does with a value that is not sealed (the bolt store reads
// values from before seals; etcd has none) is its own policy.
package seal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"google.golang.org/protobuf/proto"
)

// The header's parts.
const (
	Marker    = 0x00
	V1        = 0x01
	HeaderLen = 6
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Seal encodes m as a sealed value.
func Seal(m proto.Message) ([]byte, error) {
	size := proto.Size(m)
	b := make([]byte, HeaderLen, HeaderLen+size)
	b, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(b, m)
	if err != nil {
		return nil, err
	}
	b[0], b[1] = Marker, V1
	binary.BigEndian.PutUint32(b[2:HeaderLen], crc32.Checksum(b[HeaderLen:], castagnoli))
	return b, nil
}

// Open checks a sealed value's header and checksum and returns its
// encoding; problem says what is wrong, for the backend's ErrDataLoss.
func Open(v []byte) (data []byte, problem string) {
	if len(v) < HeaderLen || v[0] != Marker || v[1] != V1 {
		version := byte(0)
		if len(v) >= 2 {
			version = v[1]
		}
		return nil, fmt.Sprintf("its header is not a known seal (%d bytes, version byte %#x)", len(v), version)
	}
	data = v[HeaderLen:]
	if want, got := binary.BigEndian.Uint32(v[2:HeaderLen]), crc32.Checksum(data, castagnoli); want != got {
		return nil, fmt.Sprintf("its checksum does not match (stored %08x, computed %08x over %d bytes)", want, got, len(data))
	}
	return data, ""
}

// SealedButMarker says whether v is a sealed value whose marker byte alone
// was damaged (its version and checksum hold): a backend that reads
// unsealed values must not take it for one.
func SealedButMarker(v []byte) bool {
	return len(v) >= HeaderLen && v[0] != Marker && v[1] == V1 &&
		binary.BigEndian.Uint32(v[2:HeaderLen]) == crc32.Checksum(v[HeaderLen:], castagnoli)
}
