package step

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/tools"
)

// CheckArguments says how args break the input schema of the granted tool
// named tool (the grant's own, else the one ex lists for it, listed within
// timeout), or "" when they match or the tool has none: a person's
// revision of a write is held to the schema the model's call was. checked
// is false when the tool has no schema to hold them to (the proposal's
// unchecked_arguments).
func CheckArguments(ctx context.Context, ex tools.Executor, grants []*reinv1.ToolGrant, tool string, args *structpb.Struct, timeout time.Duration) (why string, checked bool, err error) {
	i := slices.IndexFunc(grants, func(g *reinv1.ToolGrant) bool { return g.GetName() == tool })
	if i < 0 {
		return fmt.Sprintf("tool %q is not granted to this run", tool), false, nil
	}
	schema := grants[i].GetInputSchema()
	if schema == nil {
		lctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		specs, err := ex.List(lctx)
		if err != nil {
			return "", false, fmt.Errorf("list the tools to check the arguments against %s's schema: %w", tool, err)
		}
		for _, sp := range specs {
			if sp.Name == tool {
				schema = sp.InputSchema
			}
		}
	}
	if schema == nil {
		return "", false, nil
	}
	is, err := compileSchema(schema)
	if err != nil {
		return "", false, fmt.Errorf("tool %s's input schema does not compile: %w", tool, err)
	}
	return is.mismatch(tool, args), true, nil
}

// ArgumentChanges are the fields in which after differs from before, each
// named by its JSON pointer (RFC 6901), in a stable order: an object's keys
// sorted, recursively; a list or a value of another kind compared whole.
func ArgumentChanges(before, after *structpb.Struct) []*reinv1.ArgumentChange {
	var out []*reinv1.ArgumentChange
	diffFields(&out, "", before.GetFields(), after.GetFields())
	return out
}

func diffFields(out *[]*reinv1.ArgumentChange, at string, before, after map[string]*structpb.Value) {
	keys := make([]string, 0, len(before)+len(after))
	for k := range before {
		keys = append(keys, k)
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		path := at + "/" + pointerToken(k)
		b, a := before[k], after[k]
		if bs, as := b.GetStructValue(), a.GetStructValue(); bs != nil && as != nil {
			diffFields(out, path, bs.GetFields(), as.GetFields())
			continue
		}
		if b != nil && a != nil && proto.Equal(b, a) {
			continue
		}
		*out = append(*out, &reinv1.ArgumentChange{Path: path, Before: b, After: a})
	}
}

// pointerToken escapes a key as a JSON pointer's token: ~ as ~0, / as ~1.
func pointerToken(k string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(k)
}
