package step

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

// Bounds on what rein writes inline in an event (docs/design.md §4): a
// payload over them is stored apart, as a content-addressed blob in the
// same append, and the event keeps a bounded summary and the blob's hash,
// so that no event, Run or list page nears the 4 MiB message limit
// whatever a tool or a model returns.
const (
	// MaxInlinePayload bounds the encoded size of a proposal's preview and
	// of its arguments. A proposal is carried by its approval_requested and
	// by the run's state (pending, approved_write), so a Run holds at most a
	// few of these.
	MaxInlinePayload = 32 << 10
	// MaxInlineString is how much of one string a summary keeps.
	MaxInlineString = 2 << 10
	// maxInlineKey is the longest field name a summary keeps.
	maxInlineKey = 256
	// MaxInlineText bounds a text the harness records from a tool (an
	// error, a refusal's reason) or a model (a reply that is no decision).
	MaxInlineText = 16 << 10
	// MaxDecisionBytes bounds a model's decision (its tool call's
	// arguments, above all): one over it is refused, as a decision that
	// does not parse is, and is not recorded, so that model_returned,
	// tool_requested and the run's open call stay far under the message
	// limit. A write that large is made in parts.
	MaxDecisionBytes = 1 << 20
)

// InlineProposal bounds p in place: a preview or arguments whose encoding
// is over MaxInlinePayload is moved to a blob (returned, keyed by
// store.BlobHash, for the append that stores p) and replaced by a summary.
// It returns nil when p is small enough as it is, and leaves p unchanged.
func InlineProposal(p *reinv1.Proposal) map[string][]byte {
	var blobs map[string][]byte
	keep := func(m proto.Message) string {
		b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		hash := store.BlobHash(b)
		if blobs == nil {
			blobs = map[string][]byte{}
		}
		blobs[hash] = b
		return hash
	}
	if v := p.GetPreview(); v != nil && proto.Size(v) > MaxInlinePayload {
		p.PreviewBlob = keep(v)
		p.Preview = Summarize(v)
	}
	if a := p.GetArguments(); a != nil && proto.Size(a) > MaxInlinePayload {
		p.ArgumentsBlob = keep(a)
		p.Arguments = summarizeStruct(a)
	}
	return blobs
}

// BlobReader is what WholeProposal needs of a store.
type BlobReader interface {
	Blobs(ctx context.Context, runID string, hashes []string) (map[string][]byte, error)
}

// errBlob marks a proposal whose stored blob cannot be read back.
var errBlob = errors.New("a proposal's stored content cannot be read")

// WholeProposal is p, a proposal of run runID, with its preview and
// arguments whole: read back from the blobs its fields name, or p itself
// when none is set. The commit path gives the tool the whole proposal; a
// replay proposes it whole again.
func WholeProposal(ctx context.Context, s BlobReader, runID string, p *reinv1.Proposal) (*reinv1.Proposal, error) {
	var hashes []string
	for _, h := range []string{p.GetPreviewBlob(), p.GetArgumentsBlob()} {
		if h != "" {
			hashes = append(hashes, h)
		}
	}
	if len(hashes) == 0 {
		return p, nil
	}
	blobs, err := s.Blobs(ctx, runID, hashes)
	whole := proto.CloneOf(p)
	read := func(hash string, m proto.Message) error {
		if err == nil {
			err = proto.Unmarshal(blobs[hash], m)
		}
		if err != nil {
			return fmt.Errorf("%w: proposal %s's blob %s: %w", errBlob, p.GetProposalId(), hash, err)
		}
		return nil
	}
	if h := p.GetPreviewBlob(); h != "" {
		whole.Preview = &structpb.Value{}
		if err := read(h, whole.Preview); err != nil {
			return nil, err
		}
	}
	if h := p.GetArgumentsBlob(); h != "" {
		whole.Arguments = &structpb.Struct{}
		if err := read(h, whole.Arguments); err != nil {
			return nil, err
		}
	}
	return whole, nil
}

// Summarize is a bounded summary of v (under MaxInlinePayload encoded):
// strings cut to MaxInlineString, a struct's fields in key order while
// they fit, a nested struct or list too large named by its size.
func Summarize(v *structpb.Value) *structpb.Value {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return structpb.NewStringValue(CutText(k.StringValue, MaxInlineString))
	case *structpb.Value_StructValue:
		return structpb.NewStructValue(summarizeStruct(k.StructValue))
	case *structpb.Value_ListValue:
		if proto.Size(v) > MaxInlineString {
			return structpb.NewStringValue(fmt.Sprintf("(a list of %d values, %d bytes encoded, stored apart)", len(k.ListValue.GetValues()), proto.Size(v)))
		}
	}
	return v
}

// summarizeStruct is Summarize of a struct.
func summarizeStruct(s *structpb.Struct) *structpb.Struct {
	keys := make([]string, 0, len(s.GetFields()))
	for k := range s.GetFields() {
		if len(k) <= maxInlineKey {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	out := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	size := 0
	for _, k := range keys {
		v := s.GetFields()[k]
		switch v.GetKind().(type) {
		case *structpb.Value_StringValue:
			v = Summarize(v)
		case *structpb.Value_StructValue, *structpb.Value_ListValue:
			if n := proto.Size(v); n > MaxInlineString {
				v = structpb.NewStringValue(fmt.Sprintf("(%d bytes encoded, stored apart)", n))
			}
		}
		// A field's entry costs its key, its value and a few bytes of
		// framing; stop before the summary passes the bound.
		n := len(k) + proto.Size(v) + 8
		if size+n > MaxInlinePayload-1024 {
			break
		}
		out.Fields[k] = v
		size += n
	}
	return out
}

// CutText is s cut to at most n bytes in all (at a UTF-8 boundary), saying
// how long it was, or s when it fits. A text it cut fits: cut again, it
// stays as it is (a replay feeds recorded texts back).
func CutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const room = 48 // for the note of the length
	cut := s[:max(n-room, 0)]
	for len(cut) > 0 && !utf8.ValidString(cut) {
		cut = cut[:len(cut)-1]
	}
	return fmt.Sprintf("%s… (cut: %d bytes in all)", cut, len(s))
}

// ProposalHash is the SHA-256 (hex) of the canonical JSON of a proposal's
// tool, arguments and preview (object keys sorted). Arguments or a preview
// stored apart are bound by their blob's hash (the SHA-256 of their
// encoding), as "arguments_blob" or "preview_blob" in place of the
// summary; a proposal with neither hashes as it always did. A proposal
// previewed again on its tool's changed definition binds that too
// (tool_digest), so its hash is never the one it supersedes.
func ProposalHash(p *reinv1.Proposal) string {
	m := map[string]any{"tool": p.GetTool()}
	if p.GetTier() == reinv1.ToolTier_TOOL_TIER_READ {
		m["tier"] = "read" // a read a policy paused: not a write
	}
	if h := p.GetArgumentsBlob(); h != "" {
		m["arguments_blob"] = h
	} else {
		m["arguments"] = p.GetArguments().AsMap()
	}
	if h := p.GetPreviewBlob(); h != "" {
		m["preview_blob"] = h
	} else {
		m["preview"] = p.GetPreview().AsInterface()
	}
	if d := p.GetToolDigest(); d != "" {
		m["tool_digest"] = d // previewed again on a changed tool: a new hash whatever the preview
	}
	canon, _ := json.Marshal(m)
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:])
}
