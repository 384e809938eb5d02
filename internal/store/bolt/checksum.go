package bolt

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"google.golang.org/protobuf/proto"

	"github.com/reinhq/rein/internal/store"
)

// A stored event, snapshot or contract is sealed: a 6-byte header, then the
// message's protobuf encoding.
//
//	byte 0     0x00: the seal's marker. No protobuf encoding of a non-empty
//	           message starts with it (field number 0 does not exist), so a
//	           value without it is one written before values were sealed
//	           (legacy): it is decoded as it is, unchecked.
//	byte 1     the seal's version, sealV1
//	bytes 2–5  CRC-32C (Castagnoli) of the encoding, big-endian
//
// A value whose seal does not check out is store.ErrDataLoss. So is a legacy
// value that does not decode.
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
// value in the error ("run R event 7"). A legacy value (no seal) is decoded
// unchecked.
func unseal(v []byte, m proto.Message, what string) error {
	data := v
	if len(v) > 0 && v[0] == sealMarker {
		if len(v) < sealLen || v[1] != sealV1 {
			return damaged(what, "its header is not a known seal (%d bytes, version byte %#x)", len(v), sealVersion(v))
		}
		data = v[sealLen:]
		want, got := binary.BigEndian.Uint32(v[2:sealLen]), crc32.Checksum(data, castagnoli)
		if want != got {
			return damaged(what, "its checksum does not match (stored %08x, computed %08x over %d bytes)", want, got, len(data))
		}
	} else if len(v) >= sealLen && v[1] == sealV1 && binary.BigEndian.Uint32(v[2:sealLen]) == crc32.Checksum(v[sealLen:], castagnoli) {
		// A seal whose marker byte was damaged: without this it would be
		// read as a legacy value, and might even decode.
		return damaged(what, "its seal's first byte is %#x, not 0x00", v[0])
	}
	if err := proto.Unmarshal(data, m); err != nil {
		return damaged(what, "it does not decode: %v", err)
	}
	return nil
}

func sealVersion(v []byte) byte {
	if len(v) < 2 {
		return 0
	}
	return v[1]
}

// damaged is an ErrDataLoss error for the value what names.
func damaged(what, format string, args ...any) error {
	return fmt.Errorf("%s: %w: %s; `rein check` lists every damaged value, restore the file from a backup",
		what, store.ErrDataLoss, fmt.Sprintf(format, args...))
}

func eventName(runID string, seq uint64) string {
	return fmt.Sprintf("run %s event %d", runID, seq)
}
