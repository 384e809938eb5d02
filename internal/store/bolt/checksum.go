package bolt

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/seal"
)

// A stored event, snapshot or contract is sealed (internal/store/seal): a
// 6-byte header, then the message's protobuf encoding.
//
//	byte 0     0x00: the seal's marker. No protobuf encoding of a non-empty
//	           message starts with it (field number 0 does not exist), so a
//	           value without it is one written before values were sealed
//	           (legacy): it is decoded as it is, unchecked.
//	byte 1     the seal's version, seal.V1
//	bytes 2–5  CRC-32C (Castagnoli) of the encoding, big-endian
//
// A value whose seal does not check out is store.ErrDataLoss. So is a legacy
// value that does not decode.
const (
	sealMarker = seal.Marker
	sealLen    = seal.HeaderLen
)

// unseal checks a stored value's seal and decodes it into m. what names the
// value in the error ("run R event 7"). A legacy value (no seal) is decoded
// unchecked.
func unseal(v []byte, m proto.Message, what string) error {
	if problem := unsealed(v, m); problem != "" {
		return damaged(what, "%s", problem)
	}
	return nil
}

// unsealed is unseal's work: it returns what is wrong with v, or "". The
// name of what was read is made only when something is: a scan makes none
// for each of a million events.
func unsealed(v []byte, m proto.Message) (problem string) {
	data := v
	if len(v) > 0 && v[0] == sealMarker {
		if data, problem = seal.Open(v); problem != "" {
			return problem
		}
	} else if seal.SealedButMarker(v) {
		// A seal whose marker byte was damaged: without this it would be
		// read as a legacy value, and might even decode.
		return fmt.Sprintf("its seal's first byte is %#x, not 0x00", v[0])
	}
	if err := proto.Unmarshal(data, m); err != nil {
		return fmt.Sprintf("it does not decode: %v", err)
	}
	return ""
}

// damaged is an ErrDataLoss error for the value what names.
func damaged(what, format string, args ...any) error {
	return fmt.Errorf("%s: %w: %s; `rein check` lists every damaged value, restore the file from a backup",
		what, store.ErrDataLoss, fmt.Sprintf(format, args...))
}

func eventName(runID string, seq uint64) string {
	return fmt.Sprintf("run %s event %d", runID, seq)
}
