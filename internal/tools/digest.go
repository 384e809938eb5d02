package tools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// Definer is an Executor that knows its tools' definitions only by their
// digests (a replay's recording, which stands in for the tools a run was
// recorded with): the digests stand for the definitions its List cannot
// give.
type Definer interface {
	Definitions(ctx context.Context) ([]*reinv1.ToolDigest, error)
}

// Definitions are the digests of the definitions of the tools exec
// serves: a Definer's own, else those of its listing (Digest).
func Definitions(ctx context.Context, exec Executor) ([]*reinv1.ToolDigest, error) {
	if d, ok := exec.(Definer); ok {
		return d.Definitions(ctx)
	}
	specs, err := exec.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*reinv1.ToolDigest, len(specs))
	for i, s := range specs {
		out[i] = Digest(s)
	}
	return out, nil
}

// Digest is the digest of a tool's definition: the SHA-256 of the
// canonical JSON (encoding/json's, whose object keys are sorted) of its
// name, tier, input schema and server. The description is not part of it:
// rewording what the model is told changes no contract.
func Digest(s Spec) *reinv1.ToolDigest {
	def := map[string]any{"name": s.Name, "tier": s.Tier.String(), "server": s.Server}
	d := &reinv1.ToolDigest{Name: s.Name, Tier: s.Tier, Server: s.Server}
	if s.InputSchema != nil {
		def["input_schema"] = s.InputSchema.AsMap()
		d.SchemaDigest = canonical(s.InputSchema.AsMap())
	}
	d.Digest = canonical(def)
	return d
}

// canonical is the hex SHA-256 of v's canonical JSON.
func canonical(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		// AsMap holds only what JSON holds; a value it cannot encode (a
		// NaN in a schema) is digested as its text.
		b = []byte(structpb.NewStringValue(err.Error()).String())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Changes names what differs between the definition a run holds and the
// one found ("tier", "schema", "server"), or "removed" when found is nil;
// nil when they are the same.
func Changes(held, found *reinv1.ToolDigest) []string {
	switch {
	case found == nil:
		return []string{"removed"}
	case held.GetDigest() == found.GetDigest():
		return nil
	}
	var out []string
	if held.GetTier() != found.GetTier() {
		out = append(out, "tier")
	}
	if held.GetSchemaDigest() != found.GetSchemaDigest() {
		out = append(out, "schema")
	}
	if held.GetServer() != found.GetServer() {
		out = append(out, "server")
	}
	if len(out) == 0 {
		out = append(out, "definition")
	}
	return out
}
