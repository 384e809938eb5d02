package storeformat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Advert is what a replica puts in its name key (internal/store/etcd's
// P replica/<name>) to say who it is and which formats its build reads and
// writes. It is JSON; a builds from before advertisements put a line of
// text there ("host h, pid 1, joined …"), which ParseAdvert reads as a
// legacy card.
type Advert struct {
	// Card says where the replica runs: host, process and join time.
	Card string `json:"card"`
	// Build is the binary's version line (internal/version.String).
	Build string `json:"build"`
	// Formats are what the build reads and writes.
	Formats Build `json:"formats"`
	// Leased is when the replica claimed its name under its current etcd
	// lease.
	Leased time.Time `json:"leased"`
}

// maxAdvertBytes bounds a name key's value ParseAdvert reads.
const maxAdvertBytes = 4096

// Encode is the advert as a name key holds it.
func (a Advert) Encode() string {
	b, err := json.Marshal(a)
	if err != nil {
		panic(err) // only strings, ints and a time
	}
	return string(b)
}

// ParseAdvert reads a name key's value. A value that is not JSON (it does
// not begin with "{") is a legacy card: legacy is true, and the replica
// counts as a Base build. A value that begins with "{" but does not decode
// (a torn or garbled key), or claims formats no build has, is an error.
func ParseAdvert(v []byte) (a Advert, legacy bool, err error) {
	if !bytes.HasPrefix(bytes.TrimSpace(v), []byte("{")) {
		return Advert{Card: string(v), Formats: Build{Reads: Range{Oldest, Base}, Writes: Range{Base, Base}}}, true, nil
	}
	if len(v) > maxAdvertBytes {
		return Advert{}, false, fmt.Errorf("the advertisement is %d bytes, over %d", len(v), maxAdvertBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(v))
	if err := dec.Decode(&a); err != nil {
		return Advert{}, false, fmt.Errorf("the advertisement does not decode (%v): a torn or garbled name key", err)
	}
	if err := a.Formats.Check(); err != nil {
		return Advert{}, false, fmt.Errorf("the advertisement claims formats no build has (%v)", err)
	}
	return a, false, nil
}

// Member is a live replica as its name key says.
type Member struct {
	Name   string
	Advert Advert
	// Legacy is a replica of a build from before advertisements.
	Legacy bool
	// Err says why its advertisement is not believed; such a member is
	// left out of Target, and finalization waits until it is gone.
	Err error
}

// ReadMember reads the name key of replica name, given the cluster's
// active format: an advertisement that does not parse, or a live replica
// that claims not to write the active format (a finalized one it could not
// have started under), is a Member with Err.
func ReadMember(name string, value []byte, active Format) Member {
	a, legacy, err := ParseAdvert(value)
	m := Member{Name: name, Advert: a, Legacy: legacy}
	switch {
	case err != nil:
		m.Err = err
	case !legacy && a.Formats.Writes.Max < active:
		m.Err = fmt.Errorf("it claims to write formats %s, but the active format is %d, which it could not have started under", a.Formats.Writes, active)
	case legacy && active > Base:
		m.Err = fmt.Errorf("a build from before store formats (format %d) runs on a store finalized to format %d: stop it and run a rein that writes format %d", Base, active, active)
	}
	return m
}

// ErrNoMembers is Target's error when no live replica's advertisement is
// believed.
var ErrNoMembers = errors.New("no live replica with a readable advertisement")

// Target is the format every live replica writes: the least of their
// newest, a legacy replica counting as Base; members with Err are left
// out. It is what a finalization makes active.
func Target(ms []Member) (Format, error) {
	var t Format
	for _, m := range ms {
		if m.Err != nil {
			continue
		}
		if w := m.Advert.Formats.Writes.Max; t == 0 || w < t {
			t = w
		}
	}
	if t == 0 {
		return 0, ErrNoMembers
	}
	return t, nil
}
