package export

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
)

const (
	testRunID = "run_01TESTEXPORT000000000000000"
	fileName  = "/tmp/some/run.rein"
)

var epoch = time.Date(2030, 1, 2, 3, 4, 5, 600, time.UTC)

func envelope(seq uint64) *reinv1.Event {
	return &reinv1.Event{
		RunId:      testRunID,
		Sequence:   seq,
		RecordedAt: timestamppb.New(epoch.Add(time.Duration(seq) * time.Second)),
		Actor:      "harness",
	}
}

// testEvents is a small whole run: started, one model call, cancelled.
func testEvents() []*reinv1.Event {
	started := envelope(1)
	started.Actor = "principal:alice"
	started.Payload = &reinv1.Event_RunStarted{RunStarted: &reinv1.RunStarted{
		Contract:  &reinv1.TaskContract{Goal: "carry a run away", Labels: map[string]string{"team": "infra", "env": "test"}},
		Principal: "alice",
		Tenant:    "acme",
	}}
	requested := envelope(2)
	requested.Payload = &reinv1.Event_ModelRequested{ModelRequested: &reinv1.ModelRequested{
		InputHash: "h2", Model: "scripted/test", InputBlobs: []string{blobKey(testBlob), blobKey(nil)},
	}}
	returned := envelope(3)
	returned.Actor = "model"
	returned.Payload = &reinv1.Event_ModelReturned{ModelReturned: &reinv1.ModelReturned{
		Decision: &reinv1.Decision{Action: &reinv1.Decision_AskHuman{AskHuman: &reinv1.AskHuman{Question: "which branch?"}}},
		Usage:    &reinv1.Usage{InputTokens: 10, OutputTokens: 5},
	}}
	cancelled := envelope(4)
	cancelled.Actor = "principal:alice"
	cancelled.Payload = &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
		From: reinv1.RunStatus_RUN_STATUS_RUNNING, To: reinv1.RunStatus_RUN_STATUS_CANCELLED, Reason: "test",
	}}
	return []*reinv1.Event{started, requested, returned, cancelled}
}

func blobKey(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// testBlob is one of the blobs testEvents' model call references; the other
// is empty.
var testBlob = []byte("a large tool output, stored apart")

func testExport() *reinv1.RunExport {
	return &reinv1.RunExport{
		FormatVersion: Version,
		RunId:         testRunID,
		Events:        testEvents(),
		Blobs:         map[string][]byte{blobKey(testBlob): testBlob, blobKey(nil): {}},
		ExportedAt:    timestamppb.New(epoch.Add(time.Hour)),
		ExportedBy:    "rein test",
	}
}

// written is x in the export format.
func written(t *testing.T, x *reinv1.RunExport) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, x); err != nil {
		t.Fatalf("Write: %v", err)
	}
	return buf.Bytes()
}

// frame wraps an encoded RunExport as Write would, without Write's checks:
// the checksum matches, whatever the body holds.
func frame(body []byte) []byte {
	sum := sha256.Sum256(body)
	return append(append([]byte(magic), body...), sum[:]...)
}

// framed is x encoded and framed without Write's checks.
func framed(t *testing.T, x *reinv1.RunExport) []byte {
	t.Helper()
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(x)
	if err != nil {
		t.Fatal(err)
	}
	return frame(body)
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	x := testExport()
	data := written(t, x)
	if !bytes.HasPrefix(data, []byte("rein-export 1\n")) {
		t.Fatalf("file starts %q, want the magic line", data[:min(len(data), 20)])
	}
	got, err := Read(bytes.NewReader(data), fileName)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if !proto.Equal(got, x) {
		t.Errorf("Read gave\n%v\nwant\n%v", got, x)
	}
	// What was read folds to the run that was written.
	st, err := runstate.ApplyAll(runstate.State{}, got.GetEvents())
	if err != nil || st.RunID != testRunID || st.Version != 4 || st.Status != reinv1.RunStatus_RUN_STATUS_CANCELLED {
		t.Errorf("fold of the events read: %+v, %v", st, err)
	}
	// Deterministic: the same message is the same bytes, maps included.
	for range 5 {
		if again := written(t, testExport()); !bytes.Equal(again, data) {
			t.Fatal("Write of the same RunExport gave different bytes")
		}
	}
	// The twin: a file that is not this one's is refused.
	if _, err := Read(bytes.NewReader(data[:len(data)-1]), fileName); !errors.Is(err, ErrDamaged) {
		t.Errorf("Read of the file less its last byte: %v, want ErrDamaged", err)
	}
}

// TestTextRoundTrip: the text form reads back as the export written, is the
// same bytes for the same export (maps included), one field a line, and is
// read as what it is, beside the binary form.
func TestTextRoundTrip(t *testing.T) {
	t.Parallel()
	x := testExport()
	var text bytes.Buffer
	if err := WriteText(&text, x); err != nil {
		t.Fatal(err)
	}
	data := text.Bytes()
	if !bytes.HasPrefix(data, []byte("{\n  \"format_version\": 1,\n  \"run_id\": \""+testRunID+"\",\n")) || !bytes.HasSuffix(data, []byte("}\n")) {
		t.Fatalf("text form starts %.60q, ends %q", data, data[max(0, len(data)-10):])
	}
	got, err := Read(bytes.NewReader(data), fileName)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if !proto.Equal(got, x) || !proto.Equal(got, readBack(t, written(t, x))) {
		t.Errorf("Read of the text form gave\n%v\nwant\n%v", got, x)
	}
	for range 5 {
		var again bytes.Buffer
		if err := WriteText(&again, testExport()); err != nil || !bytes.Equal(again.Bytes(), data) {
			t.Fatalf("WriteText of the same RunExport gave different bytes (%v)", err)
		}
	}
	// The JSON names protojson also reads are the text form too.
	camel := bytes.Replace(data, []byte(`"format_version"`), []byte(`"formatVersion"`), 1)
	if _, err := Read(bytes.NewReader(camel), fileName); err != nil {
		t.Errorf("Read with formatVersion: %v", err)
	}
	// The twins: WriteText refuses what Read refuses, and writes nothing.
	bad := testExport()
	bad.Events[1], bad.Events[2] = bad.Events[2], bad.Events[1]
	var refused bytes.Buffer
	if err := WriteText(&refused, bad); !errors.Is(err, ErrInvalid) || refused.Len() != 0 {
		t.Errorf("WriteText of events out of sequence: %v, %d bytes", err, refused.Len())
	}
	if _, err := Read(bytes.NewReader(data[:len(data)/2]), fileName); !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "text form") {
		t.Errorf("Read of half the text form: %v, want ErrDamaged naming the text form", err)
	}
}

func readBack(t *testing.T, data []byte) *reinv1.RunExport {
	t.Helper()
	x, err := Read(bytes.NewReader(data), fileName)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func TestWriteRefusesWhatReadRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		edit func(x *reinv1.RunExport)
		want error
	}{
		{"ok", func(*reinv1.RunExport) {}, nil},
		{"no version", func(x *reinv1.RunExport) { x.FormatVersion = 0 }, ErrInvalid},
		{"version 2", func(x *reinv1.RunExport) { x.FormatVersion = 2 }, ErrVersion},
		{"no events", func(x *reinv1.RunExport) { x.Events = nil }, ErrInvalid},
		{"out of sequence", func(x *reinv1.RunExport) { x.Events[1], x.Events[2] = x.Events[2], x.Events[1] }, ErrInvalid},
		{"other run", func(x *reinv1.RunExport) { x.RunId = "run_other" }, ErrInvalid},
		{"a referenced blob missing", func(x *reinv1.RunExport) { delete(x.Blobs, blobKey(testBlob)) }, ErrInvalid},
		{"no blobs", func(x *reinv1.RunExport) { x.Blobs = nil }, ErrInvalid},
		{"a blob changed", func(x *reinv1.RunExport) { x.Blobs[blobKey(testBlob)] = []byte("tampered") }, ErrInvalid},
		{"a blob nothing references", func(x *reinv1.RunExport) { x.Blobs[blobKey([]byte("extra"))] = []byte("extra") }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			x := testExport()
			tc.edit(x)
			var buf bytes.Buffer
			err := Write(&buf, x)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Write: %v, want %v", err, tc.want)
			}
			if err != nil && buf.Len() != 0 {
				t.Errorf("a refused Write wrote %d bytes", buf.Len())
			}
			if err == nil {
				if _, err := Read(&buf, fileName); err != nil {
					t.Errorf("Read of what Write wrote: %v", err)
				}
			}
		})
	}
}

func TestReadRefuses(t *testing.T) {
	t.Parallel()
	good := written(t, testExport())
	n := len(good)
	inBlob := bytes.Index(good, testBlob)
	if inBlob < 0 {
		t.Fatal("the blob's bytes are not in the file")
	}
	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 0x40
		return b
	}
	edited := func(edit func(x *reinv1.RunExport)) []byte {
		x := testExport()
		edit(x)
		return framed(t, x)
	}
	random := make([]byte, 4096)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range random {
		random[i] = byte(rng.Uint32())
	}

	for _, tc := range []struct {
		name string
		data []byte
		want error
		says string // in the message, beside the file's name
	}{
		// The success this table is the failure twin of.
		{"intact", good, nil, ""},

		{"empty", nil, ErrNotExport, "empty"},
		{"random bytes", random, ErrNotExport, "does not start with"},
		{"text", []byte("hello, world\nthis is not an export\n"), ErrNotExport, "rein export"},
		{"a JSON object that is not an export", []byte(`{"goal": "not an export"}`), ErrNotExport, "the text form"},
		{"protobuf without the magic", good[len(magic):], ErrNotExport, "does not start with"},
		{"upper-case magic", append([]byte("REIN-EXPORT 1\n"), good[len(magic):]...), ErrNotExport, "does not start with"},
		{"another format's magic", append([]byte("rein-export 2\n"), good[len(magic):]...), ErrVersion, "another format"},
		{"a later format's longer magic", append([]byte("rein-export 10\n"), good[len(magic):]...), ErrVersion, "another format"},

		{"cut inside the magic", good[:5], ErrDamaged, "first line"},
		{"cut after the magic", good[:len(magic)], ErrDamaged, "too short"},
		{"cut 10 bytes into the body", good[:len(magic)+10], ErrDamaged, "too short"},
		{"cut in the middle", good[:n/2], ErrDamaged, "checksum"},
		{"cut before the checksum", good[:n-sha256.Size], ErrDamaged, "checksum"},
		{"cut inside the checksum", good[:n-sha256.Size/2], ErrDamaged, "checksum"},
		{"cut the last byte", good[:n-1], ErrDamaged, "checksum"},
		{"a byte flipped in the middle", flip(n / 2), ErrDamaged, "checksum"},
		{"a byte flipped in the checksum", flip(n - 3), ErrDamaged, "checksum"},
		{"a byte appended", append(bytes.Clone(good), 0), ErrDamaged, "checksum"},
		{"a byte of a blob flipped", flip(inBlob + 3), ErrDamaged, "checksum"},

		{"a checksummed body that does not parse", frame([]byte{0xff, 0xff, 0xff}), ErrInvalid, "do not parse"},
		{"a later format version", edited(func(x *reinv1.RunExport) { x.FormatVersion = 2 }), ErrVersion, "version 2"},
		{"no format version", edited(func(x *reinv1.RunExport) { x.FormatVersion = 0 }), ErrInvalid, "no format version"},
		{"no run ID", edited(func(x *reinv1.RunExport) { x.RunId = "" }), ErrInvalid, "no run ID"},
		{"no events", edited(func(x *reinv1.RunExport) { x.Events = nil }), ErrInvalid, "no events"},
		{"events out of sequence", edited(func(x *reinv1.RunExport) {
			x.Events[1], x.Events[2] = x.Events[2], x.Events[1]
		}), ErrInvalid, "sequence 3"},
		{"an event missing", edited(func(x *reinv1.RunExport) {
			x.Events = append(x.Events[:1], x.Events[2:]...)
		}), ErrInvalid, "sequence 3"},
		{"no run_started first", edited(func(x *reinv1.RunExport) { x.Events = x.Events[1:] }), ErrInvalid, "sequence 2"},
		{"an event after the end", edited(func(x *reinv1.RunExport) {
			ev := envelope(5)
			ev.Payload = &reinv1.Event_ModelRequested{ModelRequested: &reinv1.ModelRequested{InputHash: "h5"}}
			x.Events = append(x.Events, ev)
		}), ErrInvalid, "sequence 5"},
		{"an event of another run", edited(func(x *reinv1.RunExport) { x.Events[2].RunId = "run_other" }), ErrInvalid, "sequence 3"},
		{"run ID not the events'", edited(func(x *reinv1.RunExport) { x.RunId = "run_other" }), ErrInvalid, "run_other"},
		{"a blob under another hash", edited(func(x *reinv1.RunExport) {
			x.Blobs[blobKey([]byte("x"))] = []byte("y")
		}), ErrInvalid, "blob"},
		// Changed, and the checksum made again to match.
		{"a referenced blob changed", edited(func(x *reinv1.RunExport) {
			x.Blobs[blobKey(testBlob)] = []byte("a large tool output, changed")
		}), ErrInvalid, "is not stored under its SHA-256"},
		{"a referenced blob missing", edited(func(x *reinv1.RunExport) {
			delete(x.Blobs, blobKey(testBlob))
		}), ErrInvalid, "event 2 references blob " + blobKey(testBlob) + ", which the file does not carry"},
		{"the empty blob missing", edited(func(x *reinv1.RunExport) {
			delete(x.Blobs, blobKey(nil))
		}), ErrInvalid, "references blob " + blobKey(nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			x, err := Read(bytes.NewReader(tc.data), fileName)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Read: %v", err)
				}
				if !proto.Equal(x, testExport()) {
					t.Errorf("Read gave %v", x)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Read: %v, want %v", err, tc.want)
			}
			if x != nil {
				t.Errorf("a refused Read returned %v", x)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, fileName+": ") {
				t.Errorf("error %q does not start with the file's name", msg)
			}
			for _, s := range []string{tc.want.Error(), tc.says} {
				if !strings.Contains(msg, s) {
					t.Errorf("error %q does not say %q", msg, s)
				}
			}
		})
	}
}

// errReader fails after its data.
type errReader struct {
	data []byte
	err  error
}

func (r *errReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func TestReadError(t *testing.T) {
	t.Parallel()
	good := written(t, testExport())
	boom := errors.New("disk on fire")
	for _, at := range []int{0, 5, len(magic), len(good) / 2} {
		_, err := Read(&errReader{data: good[:at], err: boom}, fileName)
		if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), fileName+": ") {
			t.Errorf("Read failing after %d bytes: %v, want %v with the file's name", at, err, boom)
		}
	}
	// The twin: the same reader with no failure reads the file.
	if _, err := Read(&errReader{data: good, err: io.EOF}, fileName); err != nil {
		t.Errorf("Read: %v", err)
	}
}
