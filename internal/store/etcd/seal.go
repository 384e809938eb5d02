package etcd

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/seal"
)

// A stored event, snapshot or contract is sealed as the bolt store seals
// them: a 6-byte header, then the message's protobuf encoding.
//
//	byte 0     0x00, the seal's marker
//	byte 1     the seal's version, seal.V1
//	bytes 2–5  CRC-32C (Castagnoli) of the encoding, big-endian
//
// A value whose seal does not check out is store.ErrDataLoss. Unlike a bolt
// file, an etcd prefix has no values from before seals: an unsealed value
// is damage too.
const (
	sealMarker = seal.Marker
	sealLen    = seal.HeaderLen
)

// unseal checks a stored value's seal and decodes it into m. what names the
// value in the error ("run R event 7").
func unseal(v []byte, m proto.Message, what string) error {
	data, problem := seal.Open(v)
	if problem != "" {
		return damaged(what, "%s", problem)
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
