package export

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/mem"
)

func requestedWith(seq uint64, hashes ...string) *reinv1.Event {
	ev := envelope(seq)
	ev.Payload = &reinv1.Event_ModelRequested{ModelRequested: &reinv1.ModelRequested{Model: "scripted/test", InputBlobs: hashes}}
	return ev
}

func returned(seq uint64) *reinv1.Event {
	ev := envelope(seq)
	ev.Actor = "model"
	ev.Payload = &reinv1.Event_ModelReturned{ModelReturned: &reinv1.ModelReturned{
		Decision: &reinv1.Decision{Action: &reinv1.Decision_ToolCall{ToolCall: &reinv1.ToolCall{Tool: "read", CallId: "c"}}},
	}}
	return ev
}

func compacted(seq uint64, hashes ...string) *reinv1.Event {
	ev := envelope(seq)
	cc := &reinv1.ContextCompacted{Step: 2, Compacted: uint32(len(hashes))}
	for _, h := range hashes {
		cc.Items = append(cc.Items, &reinv1.ContextItem{Kind: "observation", Source: "tool:read#c", Gist: "rows", Blob: h})
	}
	ev.Payload = &reinv1.Event_ContextCompacted{ContextCompacted: cc}
	return ev
}

// The blobs blobRun references.
var (
	blobA = []byte("the goal")
	blobB = []byte("an observation")
	blobC = bytes.Repeat([]byte("a long tool output "), 1<<16)
)

// blobRun is a run whose events reference blobs a, b, c (a twice, c from a
// compacted item) and an empty compacted item, and the blobs.
func blobRun() ([]*reinv1.Event, map[string][]byte) {
	a, b, c := blobA, blobB, blobC
	evs := []*reinv1.Event{
		testEvents()[0],
		requestedWith(2, blobKey(a), blobKey(b)),
		returned(3),
		compacted(4, blobKey(c), ""),
		requestedWith(5, blobKey(a), blobKey(c)),
	}
	return evs, map[string][]byte{blobKey(a): a, blobKey(b): b, blobKey(c): c}
}

func TestBlobRefs(t *testing.T) {
	t.Parallel()
	evs, _ := blobRun()
	got := BlobRefs(evs)
	want := []string{blobKey(blobA), blobKey(blobB), blobKey(blobC)}
	if !slices.Equal(got, want) {
		t.Errorf("BlobRefs = %v, want %v: each once, in order of first reference, none for an empty hash", got, want)
	}
	// The twin: a log without references has none.
	if got := BlobRefs(testEvents()[:1]); len(got) != 0 {
		t.Errorf("BlobRefs(run_started) = %v, want none", got)
	}
}

// TestNewFromStore: a run stored with its blobs exports with every blob its
// events reference, and the file reads back as the same run.
func TestNewFromStore(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	evs, blobs := blobRun()
	s := mem.New()
	defer s.Close()
	if _, _, err := s.Create(ctx, evs[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, testRunID, 1, evs[1:], store.WithBlobs(blobs)); err != nil {
		t.Fatal(err)
	}
	// A blob of another run is in the store too: the export does not carry it.
	if _, err := s.Append(ctx, testRunID, 5, []*reinv1.Event{returned(6)}, store.WithBlobs(map[string][]byte{blobKey([]byte("other")): []byte("other")})); err != nil {
		t.Fatal(err)
	}
	stored, err := s.Events(ctx, testRunID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	x, err := New(ctx, testRunID, stored, s)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if len(x.GetBlobs()) != len(blobs) {
		t.Errorf("New carried %d blobs, want the %d referenced", len(x.GetBlobs()), len(blobs))
	}
	for k, v := range blobs {
		if !bytes.Equal(x.GetBlobs()[k], v) {
			t.Errorf("blob %s: %d bytes, want %d", k, len(x.GetBlobs()[k]), len(v))
		}
	}
	got, err := Read(bytes.NewReader(written(t, x)), fileName)
	if err != nil {
		t.Fatalf("Read of New's export: %v", err)
	}
	if !proto.Equal(got, x) {
		t.Error("the file read is not the export written")
	}
}

// TestNewRefuses: the failure twins of TestNewFromStore: a referenced blob
// the store lacks, or no store at all, is an error, not an export without it.
func TestNewRefuses(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	evs, blobs := blobRun()
	s := mem.New()
	defer s.Close()
	if _, _, err := s.Create(ctx, evs[0]); err != nil {
		t.Fatal(err)
	}
	missing := blobKey(blobB)
	delete(blobs, missing)
	if _, err := s.Append(ctx, testRunID, 1, evs[1:], store.WithBlobs(blobs)); err != nil {
		t.Fatal(err)
	}
	x, err := New(ctx, testRunID, evs, s)
	if !errors.Is(err, store.ErrNoBlob) || !strings.Contains(err.Error(), missing) || x != nil {
		t.Errorf("New with a blob missing from the store = %v, %v; want ErrNoBlob naming %s", x, err, missing)
	}
	if _, err := New(ctx, testRunID, evs, nil); err == nil || !strings.Contains(err.Error(), "3 blobs") {
		t.Errorf("New with no store: %v, want an error saying 3 blobs are referenced", err)
	}
	// With nothing referenced, no store is needed.
	if x, err := New(ctx, testRunID, testEvents()[:1], nil); err != nil || len(x.GetBlobs()) != 0 {
		t.Errorf("New of a log without references and no store = %v, %v", x, err)
	}
	// A store that answers with other bytes: Write refuses what New built.
	x, err = New(ctx, testRunID, evs, liar{})
	if err != nil {
		t.Fatal(err)
	}
	if err := Write(&bytes.Buffer{}, x); !errors.Is(err, ErrInvalid) {
		t.Errorf("Write of an export with a blob that is not its hash's: %v, want ErrInvalid", err)
	}
}

// liar answers every blob with the same bytes.
type liar struct{}

func (liar) Blobs(_ context.Context, _ string, hashes []string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, h := range hashes {
		out[h] = []byte("not it")
	}
	return out, nil
}

// TestBlobRefsOfAProposal: a proposal's preview and arguments stored apart
// are references too, so export, import and GetBlobs carry them; the twin,
// a proposal stored whole, references nothing.
func TestBlobRefsOfAProposal(t *testing.T) {
	t.Parallel()
	proposed := func(p *reinv1.Proposal) *reinv1.Event {
		ev := envelope(2)
		ev.Payload = &reinv1.Event_ApprovalRequested{ApprovalRequested: &reinv1.ApprovalRequested{Proposal: p}}
		return ev
	}
	pv, args := blobKey([]byte("preview")), blobKey([]byte("arguments"))
	if got := BlobRefs([]*reinv1.Event{proposed(&reinv1.Proposal{PreviewBlob: pv, ArgumentsBlob: args})}); !slices.Equal(got, []string{pv, args}) {
		t.Errorf("BlobRefs = %v, want the preview's and the arguments' blobs", got)
	}
	if got := BlobRefs([]*reinv1.Event{proposed(&reinv1.Proposal{Tool: "fs.write"})}); len(got) != 0 {
		t.Errorf("BlobRefs of a whole proposal = %v, want none", got)
	}
}
