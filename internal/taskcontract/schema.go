package taskcontract

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// Schema is a tool's input schema, compiled.
type Schema struct {
	Resolved *jsonschema.Resolved
	// Raw is the schema as given, which a refusal's diagnosis reads.
	Raw map[string]any
}

// CompileSchema compiles a tool's input schema: a JSON Schema, draft
// 2020-12 or draft-07 when its $schema says so. Remote references are not
// fetched: a schema must hold everything it refers to.
func CompileSchema(s *structpb.Struct) (*Schema, error) {
	raw := s.AsMap()
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	var js jsonschema.Schema
	if err := json.Unmarshal(b, &js); err != nil {
		return nil, err
	}
	switch js.Schema {
	case "", "https://json-schema.org/draft/2020-12/schema",
		"http://json-schema.org/draft-07/schema#", "https://json-schema.org/draft-07/schema#":
	default:
		return nil, fmt.Errorf("$schema %q is not supported: use draft 2020-12 (the default) or draft-07", js.Schema)
	}
	if err := checkTypes(&js); err != nil {
		return nil, err
	}
	rs, err := js.Resolve(&jsonschema.ResolveOptions{})
	if err != nil {
		return nil, err
	}
	return &Schema{Resolved: rs, Raw: raw}, nil
}

var jsonTypes = []string{"array", "boolean", "integer", "null", "number", "object", "string"}

// checkTypes refuses a "type" that names no JSON type, which the
// validator would accept and then match nothing against.
func checkTypes(s *jsonschema.Schema) error {
	if s == nil {
		return nil
	}
	for _, t := range append([]string{s.Type}, s.Types...) {
		if t != "" && !slices.Contains(jsonTypes, t) {
			return fmt.Errorf("type %q is not a JSON type (one of %s)", t, strings.Join(jsonTypes, ", "))
		}
	}
	subs := []*jsonschema.Schema{s.Items, s.AdditionalProperties, s.AdditionalItems, s.Contains, s.Not, s.If, s.Then, s.Else,
		s.PropertyNames, s.UnevaluatedItems, s.UnevaluatedProperties}
	subs = append(subs, s.PrefixItems...)
	subs = append(subs, s.ItemsArray...)
	subs = append(subs, s.AllOf...)
	subs = append(subs, s.AnyOf...)
	subs = append(subs, s.OneOf...)
	for _, m := range []map[string]*jsonschema.Schema{s.Properties, s.PatternProperties, s.Defs, s.Definitions, s.DependentSchemas} {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			subs = append(subs, m[k])
		}
	}
	for _, sub := range subs {
		if err := checkTypes(sub); err != nil {
			return err
		}
	}
	return nil
}

// checkSchemas checks that every grant's input schema compiles.
func checkSchemas(grants []*reinv1.ToolGrant) error {
	for i, g := range grants {
		if g.GetInputSchema() == nil {
			continue
		}
		if _, err := CompileSchema(g.GetInputSchema()); err != nil {
			return &FieldError{fmt.Sprintf("contract.tools[%d].input_schema", i),
				fmt.Sprintf("the input schema of tool %q does not compile (JSON Schema draft 2020-12 or draft-07): %v", g.GetName(), err)}
		}
	}
	return nil
}
