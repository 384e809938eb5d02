package seal

import (
	"testing"

	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

func TestSealOpens(t *testing.T) {
	ev := &reinv1.Event{RunId: "run_a", Sequence: 7, Actor: "harness"}
	v, err := Seal(ev)
	if err != nil {
		t.Fatal(err)
	}
	data, problem := Open(v)
	if problem != "" {
		t.Fatal(problem)
	}
	var got reinv1.Event
	if err := proto.Unmarshal(data, &got); err != nil || !proto.Equal(&got, ev) {
		t.Fatalf("opened %v (%v), want %v", &got, err, ev)
	}
	if SealedButMarker(v) {
		t.Error("an intact seal reads as one with a damaged marker")
	}
}

// The twins: a flipped byte of the encoding, an unknown version and a cut
// header are each a problem; a damaged marker alone is recognised.
func TestSealRefusesDamage(t *testing.T) {
	v, err := Seal(&reinv1.Event{RunId: "run_a", Sequence: 7})
	if err != nil {
		t.Fatal(err)
	}
	flip := func(i int) []byte { b := append([]byte(nil), v...); b[i] ^= 0xff; return b }
	for name, bad := range map[string][]byte{"encoding": flip(len(v) - 1), "version": flip(1), "cut": v[:3]} {
		if _, problem := Open(bad); problem == "" {
			t.Errorf("%s damaged: opened", name)
		}
	}
	if m := flip(0); !SealedButMarker(m) {
		t.Error("a seal whose marker alone is damaged is not recognised")
	}
}
