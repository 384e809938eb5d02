package storeformat

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// future is a build one format past this one that still writes this one:
// the build a rolling upgrade brings in.
var future = Build{Reads: Range{Oldest, Current + 1}, Writes: Range{Current, Current + 1}}

func advert(b Build) []byte {
	return []byte(Advert{Card: "host h, pid 1", Build: "rein test", Formats: b, Leased: time.Unix(0, 0)}.Encode())
}

func TestHistoryEndsAtCurrent(t *testing.T) {
	h := History()
	for i, b := range h {
		if b.Format != Format(i+1) || b.Added == "" || b.Since == "" {
			t.Fatalf("row %d: %+v: the table numbers formats from 1, each with what it added", i, b)
		}
	}
	if h[len(h)-1].Format != Current || Base > Current || Oldest != 1 {
		t.Fatalf("the table ends at %d, Current is %d, Base %d", h[len(h)-1].Format, Current, Base)
	}
	if err := This().Check(); err != nil {
		t.Fatal(err)
	}
}

func TestTarget(t *testing.T) {
	legacy := []byte("host old, pid 7, joined 2026-12-01T00:00:00Z")
	cases := []struct {
		name    string
		values  [][]byte
		active  Format
		want    Format
		bad     int // members with Err
		wantErr error
	}{
		{"all this build", [][]byte{advert(This()), advert(This())}, Base, Current, 0, nil},
		{"mixed: the least wins", [][]byte{advert(future), advert(This()), advert(future)}, Base, Current, 0, nil},
		{"all upgraded", [][]byte{advert(future), advert(future)}, Base, Current + 1, 0, nil},
		{"a missing advertisement counts as Base", [][]byte{advert(future), legacy}, Base, Base, 0, nil},
		{"a garbled key is left out", [][]byte{advert(future), []byte(`{"formats":{"reads":`)}, Base, Current + 1, 1, nil},
		{"a nonsense range is left out", [][]byte{advert(future), advert(Build{Reads: Range{5, 2}, Writes: Range{2, 2}})}, Base, Current + 1, 1, nil},
		{"a range past any build is left out", [][]byte{advert(future), advert(Build{Reads: Range{1, 1 << 40}, Writes: Range{1, 1 << 40}})}, Base, Current + 1, 1, nil},
		{"writes what it cannot read", [][]byte{advert(future), advert(Build{Reads: Range{1, 3}, Writes: Range{3, 9}})}, Base, Current + 1, 1, nil},
		{"a liar under the finalized format is left out", [][]byte{advert(future), advert(This())}, Current + 1, Current + 1, 1, nil},
		{"only liars", [][]byte{[]byte("{")}, Base, 0, 1, ErrNoMembers},
		{"none", nil, Base, 0, 0, ErrNoMembers},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var ms []Member
			bad := 0
			for i, v := range c.values {
				m := ReadMember(string(rune('a'+i)), v, c.active)
				if m.Err != nil {
					bad++
				}
				ms = append(ms, m)
			}
			got, err := Target(ms)
			if !errors.Is(err, c.wantErr) || got != c.want || bad != c.bad {
				t.Fatalf("Target = %d, %v with %d refused; want %d, %v with %d", got, err, bad, c.want, c.wantErr, c.bad)
			}
		})
	}
}

func TestParseAdvertLegacy(t *testing.T) {
	a, legacy, err := ParseAdvert([]byte("host h, pid 1, joined x"))
	if err != nil || !legacy || a.Formats.Writes != (Range{Base, Base}) || a.Card != "host h, pid 1, joined x" {
		t.Fatalf("legacy card: %+v %v %v", a, legacy, err)
	}
	a, legacy, err = ParseAdvert(advert(future))
	if err != nil || legacy || a.Formats != future {
		t.Fatalf("advert: %+v %v %v", a, legacy, err)
	}
	if _, _, err := ParseAdvert([]byte("{" + strings.Repeat(" ", maxAdvertBytes) + "}")); err == nil {
		t.Fatal("an advertisement over the bound was read")
	}
}

func TestServes(t *testing.T) {
	if err := This().Serves(Base, "the store"); err != nil {
		t.Fatal(err)
	}
	if err := future.Serves(Current, "the store"); err != nil {
		t.Fatalf("the new build refused a store the old one wrote: %v", err)
	}
	err := This().Serves(Current+1, "the etcd prefix /p/")
	if !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), fmt.Sprintf("format %d", Current+1)) || !strings.Contains(err.Error(), fmt.Sprintf("up to %d", Current)) {
		t.Fatalf("an old build on a newer store: %v", err)
	}
	newOnly := Build{Reads: Range{Oldest, Current + 2}, Writes: Range{Current + 2, Current + 2}}
	if err := newOnly.Serves(Current, "the store"); !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), "upgrade through") {
		t.Fatalf("a build two formats ahead: %v", err)
	}
}

// TestGateFutureFeature: a feature of format Current+1 stays off while the
// cluster's active format is Current, and turns on with a finalization.
func TestGateFutureFeature(t *testing.T) {
	g := NewGate(future, Current, nil)
	if !g.Allows("old", Current) {
		t.Fatal("a feature of the active format is off")
	}
	if g.Allows("next", Current+1) {
		t.Fatal("a feature of a format not yet active is on")
	}
	if off := g.Off(); len(off) != 1 || off[0] != "next" {
		t.Fatalf("Off = %v", off)
	}
	g.SetActive(Current + 1)
	if !g.Allows("next", Current+1) || len(g.Off()) != 0 {
		t.Fatalf("after finalization the feature is still off: %v", g.Off())
	}
	// A build that does not write a format never allows it.
	if NewGate(This(), Current+1, nil).Allows("next", Current+1) {
		t.Fatal("a feature of a format this build does not write is on")
	}
}
