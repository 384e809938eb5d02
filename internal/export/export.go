// Package export owns the file format of one run carried away from a store:
// `rein export` writes it; `rein inspect FILE`, `rein events FILE`,
// `rein import FILE` and `rein replay FILE|DIR` read it.
//
// A file is in one of two forms, told apart by its first bytes. The binary
// form (Write; what `rein export` writes) is, byte for byte:
//
//	"rein-export 1\n"                  the magic line
//	RunExport                          its deterministic protobuf encoding
//	SHA-256 of the RunExport bytes     32 bytes
//
// The text form (WriteText; the recordings checked in under testdata/, so
// that a changed recording is a readable diff) is the RunExport's protojson,
// with the proto field names, indented two spaces a level, one field a line,
// fields in field-number order and map keys sorted: the same run always
// gives the same bytes. It starts with its format_version, which is how Read
// knows it:
//
//	{
//	  "format_version": 1,
//	  "run_id": "run_…",
//	  …
//	}
//
// The text form has no checksum (it is meant to be read, and diffed): a text
// file that no longer parses is refused as damaged, and every check below
// holds for it as for the binary form.
//
// Invariants: Read returns only a RunExport whose format_version is
// Version, whose checksum matches (binary form), whose events fold with
// runstate.ApplyAll from the zero state, whose run_id is its events', whose
// blobs are stored under their SHA-256, and which carries every blob its
// events reference (BlobRefs); anything else is refused with an error that
// names the file. Write and WriteText refuse to write what Read would
// refuse; Check applies Read's checks to a RunExport that came another way.
// New builds the RunExport of a stored run, its blobs included.
package export

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
)

// Version is the format version this package writes and reads.
const Version = 1

// magic is the first line of every export file.
const magic = "rein-export 1\n"

// magicName is the magic line's words, before the version.
const magicName = "rein-export "

// Errors Read returns, wrapped with the file's name and the detail. Match
// them with errors.Is.
var (
	// ErrNotExport: the file is not a rein export file at all.
	ErrNotExport = errors.New("not a rein export file")
	// ErrDamaged: the file was cut short or changed after it was written
	// (a binary file whose checksum does not match, a text file that no
	// longer parses).
	ErrDamaged = errors.New("damaged or truncated")
	// ErrVersion: the file is in a format version this rein does not read.
	ErrVersion = errors.New("unsupported format version")
	// ErrInvalid: the file is intact but what it holds is not one run's
	// log: it does not parse, its events do not fold, its run ID is not
	// its events', a blob is not stored under its hash, a blob an event
	// references is not in it.
	ErrInvalid = errors.New("not a valid run")
)

// Blobs is where New reads the blobs a run's events reference. A
// store.Store is one.
type Blobs interface {
	// Blobs returns the content of each of hashes (SHA-256 in lower-case
	// hex) that run runID stored, keyed by hash.
	Blobs(ctx context.Context, runID string, hashes []string) (map[string][]byte, error)
}

// New returns the export of a run's whole log, evs, with every blob the
// events reference read from blobs; the caller may set exported_at and
// exported_by. blobs may be nil when the events reference none. It does not
// check the log: Write does.
func New(ctx context.Context, runID string, evs []*reinv1.Event, blobs Blobs) (*reinv1.RunExport, error) {
	x := &reinv1.RunExport{FormatVersion: Version, RunId: runID, Events: evs}
	refs := BlobRefs(evs)
	if len(refs) == 0 {
		return x, nil
	}
	if blobs == nil {
		return nil, fmt.Errorf("export run %s: its events reference %d blobs and there is no store to read them from", runID, len(refs))
	}
	got, err := blobs.Blobs(ctx, runID, refs)
	if err != nil {
		return nil, fmt.Errorf("export run %s: read its %d blobs: %w", runID, len(refs), err)
	}
	x.Blobs = make(map[string][]byte, len(refs))
	for _, hash := range refs {
		b, ok := got[hash]
		if !ok {
			return nil, fmt.Errorf("export run %s: the store did not return blob %s", runID, hash)
		}
		x.Blobs[hash] = b
	}
	return x, nil
}

// BlobRefs returns the hashes of the blobs evs reference (a model_requested
// event's input_blobs, a context_compacted item's blob, an
// approval_requested proposal's preview_blob and arguments_blob), each once,
// in the order of their first reference. An empty hash is no reference.
func BlobRefs(evs []*reinv1.Event) []string {
	var refs []string
	seen := map[string]bool{}
	add := func(hash string) {
		if !seen[hash] {
			seen[hash] = true
			refs = append(refs, hash)
		}
	}
	for _, ev := range evs {
		eachRef(ev, add)
	}
	return refs
}

// eachRef calls fn with each blob hash ev references, in order, "" left out.
func eachRef(ev *reinv1.Event, fn func(hash string)) {
	for _, hash := range ev.GetModelRequested().GetInputBlobs() {
		if hash != "" {
			fn(hash)
		}
	}
	for _, item := range ev.GetContextCompacted().GetItems() {
		if hash := item.GetBlob(); hash != "" {
			fn(hash)
		}
	}
	// A proposal's preview and arguments stored apart.
	p := ev.GetApprovalRequested().GetProposal()
	for _, hash := range []string{p.GetPreviewBlob(), p.GetArgumentsBlob()} {
		if hash != "" {
			fn(hash)
		}
	}
}

// Write writes x to w in the export format. x must be of format Version and
// hold a log that Read accepts; nothing is written otherwise.
func Write(w io.Writer, x *reinv1.RunExport) error {
	data, err := Encode(x)
	if err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		return fmt.Errorf("export run %s: %w", x.GetRunId(), err)
	}
	return nil
}

// Encode is the bytes Write writes: x in the binary form, made in one
// buffer of its size. x must be of format Version and hold a log that Read
// accepts.
func Encode(x *reinv1.RunExport) ([]byte, error) {
	if err := Check(x); err != nil {
		return nil, fmt.Errorf("export run %s: %w", x.GetRunId(), err)
	}
	opts := proto.MarshalOptions{Deterministic: true}
	buf := make([]byte, 0, len(magic)+opts.Size(x)+sha256.Size)
	buf = append(buf, magic...)
	buf, err := opts.MarshalAppend(buf, x)
	if err != nil {
		return nil, fmt.Errorf("export run %s: encode: %w", x.GetRunId(), err)
	}
	sum := sha256.Sum256(buf[len(magic):])
	return append(buf, sum[:]...), nil
}

// WriteText writes x to w in the export's text form. x must be of format
// Version and hold a log that Read accepts; nothing is written otherwise.
func WriteText(w io.Writer, x *reinv1.RunExport) error {
	if err := Check(x); err != nil {
		return fmt.Errorf("export run %s: %w", x.GetRunId(), err)
	}
	body, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(x)
	if err != nil {
		return fmt.Errorf("export run %s: encode: %w", x.GetRunId(), err)
	}
	// protojson's own spacing is deliberately unstable from one build to
	// the next; json.Indent lays it out again, the same way every time.
	var buf bytes.Buffer
	if err := json.Indent(&buf, body, "", "  "); err != nil {
		return fmt.Errorf("export run %s: encode: %w", x.GetRunId(), err)
	}
	buf.WriteByte('\n')
	if _, err := w.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("export run %s: %w", x.GetRunId(), err)
	}
	return nil
}

// Read reads one export file from r, in either form. name is the file's
// name for errors; every error starts with it and says what to do.
func Read(r io.Reader, name string) (*reinv1.RunExport, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("%s: read: %w", name, err)
	}
	if isText(data) {
		return readText(data, name)
	}
	return readBinary(data, name)
}

// isText says whether data is in the text form: a JSON object whose first
// member is the format version (under its proto or its JSON name).
func isText(data []byte) bool {
	rest, ok := bytes.CutPrefix(bytes.TrimLeft(data, " \t\r\n"), []byte("{"))
	rest = bytes.TrimLeft(rest, " \t\r\n")
	return ok && (bytes.HasPrefix(rest, []byte(`"format_version"`)) || bytes.HasPrefix(rest, []byte(`"formatVersion"`)))
}

// readText reads the text form.
func readText(data []byte, name string) (*reinv1.RunExport, error) {
	x := &reinv1.RunExport{}
	if err := protojson.Unmarshal(data, x); err != nil {
		// protojson's messages carry the line and column, and non-breaking
		// spaces meant to keep programs from parsing them.
		msg := strings.TrimPrefix(strings.ReplaceAll(err.Error(), "\u00a0", " "), "proto: ")
		return nil, fmt.Errorf("%s: %w: it is a run export in text form that does not parse: %s; record or export the run again", name, ErrDamaged, msg)
	}
	if err := Check(x); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return x, nil
}

// readBinary reads the binary form.
func readBinary(data []byte, name string) (*reinv1.RunExport, error) {
	head := data[:min(len(data), len(magic))]
	switch n := len(head); {
	case n == 0:
		return nil, fmt.Errorf("%s: %w: the file is empty; write one with `rein export RUN_ID -o FILE`", name, ErrNotExport)
	case n < len(magic) && bytes.HasPrefix([]byte(magic), head):
		return nil, fmt.Errorf("%s: %w: the file ends inside its first line (%d bytes); export the run again", name, ErrDamaged, n)
	case string(head) == magic:
	case bytes.HasPrefix(head, []byte(magicName)):
		return nil, fmt.Errorf("%s: %w: its first line is not %q: a rein that writes another format wrote it; read it with that rein or a newer one",
			name, ErrVersion, magic[:len(magic)-1])
	default:
		return nil, fmt.Errorf("%s: %w: it does not start with %q (the binary form) nor with {\"format_version\": (the text form); pass a file written by `rein export`",
			name, ErrNotExport, magic[:len(magic)-1])
	}
	rest := data[len(magic):]
	if len(rest) < sha256.Size {
		return nil, fmt.Errorf("%s: %w: the file is %d bytes, too short to hold its checksum; export the run again",
			name, ErrDamaged, len(magic)+len(rest))
	}
	body, sum := rest[:len(rest)-sha256.Size], rest[len(rest)-sha256.Size:]
	if got := sha256.Sum256(body); !bytes.Equal(got[:], sum) {
		return nil, fmt.Errorf("%s: %w: its checksum does not match its contents; export the run again, or copy the file again", name, ErrDamaged)
	}
	x := &reinv1.RunExport{}
	if err := proto.Unmarshal(body, x); err != nil {
		return nil, fmt.Errorf("%s: %w: its contents do not parse (%v); export the run again", name, ErrInvalid, err)
	}
	if err := Check(x); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return x, nil
}

// Check says whether x is one whole run's log in format Version, as Read
// checks a file's: a RunExport that did not come from a file (an ImportRun
// request) is checked with it. Its errors wrap ErrInvalid or ErrVersion and
// say what is wrong.
func Check(x *reinv1.RunExport) error {
	if v := x.GetFormatVersion(); v != Version {
		if v == 0 {
			return fmt.Errorf("%w: it has no format version; export the run again", ErrInvalid)
		}
		return fmt.Errorf("%w: format version %d, this rein reads version %d; use a newer rein", ErrVersion, v, Version)
	}
	if x.GetRunId() == "" {
		return fmt.Errorf("%w: it has no run ID; export the run again", ErrInvalid)
	}
	evs := x.GetEvents()
	if len(evs) == 0 {
		return fmt.Errorf("%w: run %s has no events; export the run again", ErrInvalid, x.GetRunId())
	}
	st := runstate.State{}
	for i, ev := range evs {
		next, err := runstate.Apply(st, ev)
		if err != nil {
			return fmt.Errorf("%w: run %s: event %d of %d (sequence %d) does not fold: %v; export the run again",
				ErrInvalid, x.GetRunId(), i+1, len(evs), ev.GetSequence(), err)
		}
		st = next
	}
	if st.RunID != x.GetRunId() {
		return fmt.Errorf("%w: the file names run %s but its events are run %s; export the run again",
			ErrInvalid, x.GetRunId(), st.RunID)
	}
	for key, blob := range x.GetBlobs() {
		sum := sha256.Sum256(blob)
		if hex.EncodeToString(sum[:]) != key {
			return fmt.Errorf("%w: run %s: blob %q is not stored under its SHA-256; export the run again", ErrInvalid, x.GetRunId(), key)
		}
	}
	var missing error
	for _, ev := range evs {
		eachRef(ev, func(hash string) {
			if _, ok := x.GetBlobs()[hash]; !ok && missing == nil {
				missing = fmt.Errorf("%w: run %s: event %d references blob %s, which the file does not carry; export the run again",
					ErrInvalid, x.GetRunId(), ev.GetSequence(), hash)
			}
		})
		if missing != nil {
			return missing
		}
	}
	for _, c := range x.GetChildren() {
		if err := Check(c); err != nil {
			return err
		}
		if by := c.GetEvents()[0].GetRunStarted().GetDelegatedBy(); by.GetParentRunId() != x.GetRunId() {
			return fmt.Errorf("%w: run %s is carried as a child of run %s, but its parent is %q; export the tree again",
				ErrInvalid, c.GetRunId(), x.GetRunId(), by.GetParentRunId())
		}
	}
	return nil
}
