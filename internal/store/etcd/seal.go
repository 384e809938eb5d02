package etcd

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"google.golang.org/protobuf/proto"

	"github.com/reinhq/rein/internal/store"
)

// A stored event, snapshot or contract is sealed as the bolt store seals
// them: a 6-byte header, then the message's protobuf encoding.
//
//	byte 0     0x00, the seal's marker
//	byte 1     the seal's version, sealV1
//	bytes 2–5  CRC-32C (Castagnoli) of the encoding, big-endian
//
// A value whose seal does not check out is store.ErrDataLoss. Unlike a bolt
// file, an etcd prefix has no values from before seals: an unsealed value
// is damage too.
const (
	sealMarker = 0x00
	sealV1     = 0x01
	sealLen    = 6
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// seal encodes m as a sealed value.
func seal(m proto.Message) ([]byte, error) {
	size := proto.Size(m)
	b := make([]byte, sealLen, sealLen+size)
	b, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(b, m)
	if err != nil {
		return nil, err
	}
	b[0], b[1] = sealMarker, sealV1
	binary.BigEndian.PutUint32(b[2:sealLen], crc32.Checksum(b[sealLen:], castagnoli))
	return b, nil
}

// unseal checks a stored value's seal and decodes it into m. what names the
// value in the error ("run R event 7").
func unseal(v []byte, m proto.Message, what string) error {
	if len(v) < sealLen || v[0] != sealMarker || v[1] != sealV1 {
		return damaged(what, "its header is not a rein seal (%d bytes)", len(v))
	}
	data := v[sealLen:]
	if want, got := binary.BigEndian.Uint32(v[2:sealLen]), crc32.Checksum(data, castagnoli); want != got {
		return damaged(what, "its checksum does not match (stored %08x, computed %08x over %d bytes)", want, got, len(data))
	}
	if err := proto.Unmarshal(data, m); err != nil {
		return damaged(what, "it does not decode: %v", err)
	}
	return nil
}

// damaged is an ErrDataLoss error for the value what names.
func damaged(what, format string, args ...any) error {
	return fmt.Errorf("%s: %w: %s; something other than rein wrote under the store's etcd prefix, or the cluster lost data: restore it from an etcd snapshot",
		what, store.ErrDataLoss, fmt.Sprintf(format, args...))
}

func eventName(runID string, seq uint64) string {
	return fmt.Sprintf("run %s event %d", runID, seq)
}
