package replay

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/export"
)

// TestRecordingsAreText: every checked-in recording is in the export's text
// form, exactly as WriteText writes what it holds (so -update gives the
// same bytes for the same runs).
func TestRecordingsAreText(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(recordings, "*.rein"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no recordings in %s (%v)", recordings, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var again bytes.Buffer
		if err := export.WriteText(&again, readExport(t, f)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data, again.Bytes()) {
			t.Errorf("%s is not the text form of what it holds; run go test ./internal/replay -update", f)
		}
	}
}

// TestReplayTextAndBinaryAlike: a recording read from its text form and
// from the binary form of the same export is the same export, and replays
// the same way: every recording, and a copy of one that diverges.
func TestReplayTextAndBinaryAlike(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(recordings, "*.rein"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no recordings in %s (%v)", recordings, err)
	}
	diverging := readExport(t, filepath.Join(recordings, "approve.rein"))
	diverging.GetEvents()[1].GetModelRequested().InputHash = "0000"
	cases := map[string]*reinv1.RunExport{"approve.rein, its input hash changed": diverging}
	for _, f := range files {
		cases[filepath.Base(f)] = readExport(t, f)
	}
	for name, x := range cases {
		t.Run(name, func(t *testing.T) {
			var text, binary bytes.Buffer
			if err := export.WriteText(&text, x); err != nil {
				t.Fatal(err)
			}
			if err := export.Write(&binary, x); err != nil {
				t.Fatal(err)
			}
			fromText, err := export.Read(&text, "text")
			if err != nil {
				t.Fatal(err)
			}
			fromBinary, err := export.Read(&binary, "binary")
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(fromText, fromBinary) {
				t.Fatal("the text and the binary form hold different exports")
			}
			rt, err := Run(context.Background(), fromText.GetEvents(), Options{Children: TreeChildren(fromText)})
			if err != nil {
				t.Fatal(err)
			}
			rb, err := Run(context.Background(), fromBinary.GetEvents(), Options{Children: TreeChildren(fromBinary)})
			if err != nil {
				t.Fatal(err)
			}
			if rt.RunID != rb.RunID || rt.Events != rb.Events || !sameDivergence(rt.Divergence, rb.Divergence) {
				t.Fatalf("text: %+v; binary: %+v", rt, rb)
			}
			if wantDiverged := x == diverging; (rt.Divergence != nil) != wantDiverged {
				t.Fatalf("divergence %v, want one: %v", rt.Divergence, wantDiverged)
			}
		})
	}
}

func sameDivergence(a, b *Divergence) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Sequence == b.Sequence && a.Field == b.Field && proto.Equal(a.Expected, b.Expected) && proto.Equal(a.Got, b.Got)
}

// TestReplayRefusesCorruptedText is the twin: a text recording damaged in
// any of these ways is refused when read, with an error naming the file and
// what is wrong, and nothing is replayed.
func TestReplayRefusesCorruptedText(t *testing.T) {
	good, err := os.ReadFile(filepath.Join(recordings, "approve.rein"))
	if err != nil {
		t.Fatal(err)
	}
	replace := func(old, new string) []byte {
		if !bytes.Contains(good, []byte(old)) {
			t.Fatalf("approve.rein has no %q", old)
		}
		return bytes.Replace(good, []byte(old), []byte(new), 1)
	}
	for _, tc := range []struct {
		name string
		data []byte
		want error
		says string
	}{
		{"cut in the middle", good[:len(good)/2], export.ErrDamaged, "does not parse"},
		{"a brace lost", good[:len(good)-2], export.ErrDamaged, "does not parse"},
		{"a field misspelt", replace(`"sequence"`, `"sequense"`), export.ErrDamaged, "sequense"},
		{"a number made text", replace(`"format_version": 1`, `"format_version": "one"`), export.ErrDamaged, `invalid value for uint32 field formatVersion: "one"`},
		{"an event's sequence changed", replace(`"sequence": "3"`, `"sequence": "4"`), export.ErrInvalid, "does not fold"},
		{"a later format version", replace(`"format_version": 1`, `"format_version": 2`), export.ErrVersion, "version 2"},
		{"the format version moved", replace(`"format_version": 1,`, `"exported_by": "x", "format_version": 1,`), export.ErrNotExport, "text form"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "approve.rein")
			if err := os.WriteFile(path, tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			x, err := export.Read(f, path)
			if !errors.Is(err, tc.want) || x != nil {
				t.Fatalf("Read: %v, %v; want %v", x, err, tc.want)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, path+": ") || !strings.Contains(msg, tc.says) {
				t.Errorf("error %q does not name the file and say %q", msg, tc.says)
			}
		})
	}
}

// TestReplayReadsRetryPastDeadline: replay feeds back a failed call whose
// retry would have passed the deadline from budget_reached's
// retry_past_deadline, not from its detail.
func TestReplayReadsRetryPastDeadline(t *testing.T) {
	x := readExport(t, filepath.Join(recordings, "retry_past_deadline.rein"))
	var at uint64
	for _, ev := range x.GetEvents() {
		if late := ev.GetBudgetReached().GetRetryPastDeadline(); late != nil {
			at = ev.GetSequence()
			if late.GetError() == "" || late.GetWait().AsDuration() <= 0 || late.GetStep() == 0 {
				t.Fatalf("retry_past_deadline %v: want the call's step, error and wait", late)
			}
			// A detail that says nothing: replay has the data.
			ev.GetBudgetReached().Detail = "cut"
		}
	}
	if at == 0 {
		t.Fatal("retry_past_deadline.rein records no retry_past_deadline")
	}
	res, err := Run(context.Background(), x.GetEvents(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The harness writes its sentence again, from the failure replay gave
	// it: the runs part on the detail alone.
	if d := res.Divergence; d == nil || d.Sequence != at || d.Field != "budget_reached.detail" ||
		!proto.Equal(d.Got.GetBudgetReached().GetRetryPastDeadline(), d.Expected.GetBudgetReached().GetRetryPastDeadline()) {
		t.Fatalf("divergence %v, want one at sequence %d on budget_reached.detail alone", d, at)
	}

	// The twin: a recorded wait short enough to retry within the deadline
	// is what replay feeds back, so the harness retries where the recording
	// gave up.
	x = readExport(t, filepath.Join(recordings, "retry_past_deadline.rein"))
	for _, ev := range x.GetEvents() {
		if late := ev.GetBudgetReached().GetRetryPastDeadline(); late != nil {
			late.Wait = durationpb.New(time.Millisecond)
		}
	}
	res, err = Run(context.Background(), x.GetEvents(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if d := res.Divergence; d == nil || d.Sequence != at || d.Got.GetModelRetried() == nil {
		t.Fatalf("divergence %v, want a model_retried at sequence %d", d, at)
	}
}

// TestReplayRecordingBeforeRetryPastDeadline: a recording made before
// budget_reached had retry_past_deadline (binary, as rein wrote it then)
// still replays: the failure is read from its detail, and the event the
// harness makes now, with the field, matches it.
func TestReplayRecordingBeforeRetryPastDeadline(t *testing.T) {
	x := readExport(t, filepath.Join("testdata", "retry_past_deadline.before_field.rein"))
	evs := x.GetEvents()
	at := -1
	for i, ev := range evs {
		if br := ev.GetBudgetReached(); br != nil {
			at = i
			if br.GetRetryPastDeadline() != nil {
				t.Fatal("the old recording has retry_past_deadline")
			}
		}
	}
	if at < 0 {
		t.Fatal("the old recording has no budget_reached")
	}
	res, err := Run(context.Background(), evs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Divergence != nil {
		t.Fatalf("an old recording: %v", res.Divergence)
	}
	if evs[at].GetBudgetReached().GetRetryPastDeadline() != nil {
		t.Error("replay changed the recording it was given")
	}

	// The twin: the same detail with a wait that does not parse is not
	// upgraded, and the runs part there.
	br := evs[at].GetBudgetReached()
	if br.Detail = strings.Replace(br.GetDetail(), "a retry after 2s", "a retry after soon", 1); !strings.Contains(br.Detail, "soon") {
		t.Fatalf("the old recording's detail %q names no 2s retry", br.GetDetail())
	}
	if up := upgrade(evs); up[at].GetBudgetReached().GetRetryPastDeadline() != nil {
		t.Fatal("a detail whose wait does not parse was upgraded")
	}
	res, err = Run(context.Background(), evs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if d := res.Divergence; d == nil || d.Sequence != evs[at].GetSequence() {
		t.Fatalf("divergence %v, want one at sequence %d", d, evs[at].GetSequence())
	}
}
