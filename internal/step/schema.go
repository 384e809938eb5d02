package step

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/google/jsonschema-go/jsonschema"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/taskcontract"
)

// A tool's input schema is a JSON Schema (draft 2020-12, or draft-07 when
// its $schema says so). A call whose arguments do not match is refused
// before the tool runs or a write is proposed: the refusal is an
// observation for the model and costs the step.

// inputSchema is one tool's compiled input schema.
type inputSchema struct {
	resolved *jsonschema.Resolved
	// raw is the schema as given, read by the refusal's diagnosis.
	raw map[string]any
	// from says where the schema came from, for the model.
	from string
}

// maxGivenText bounds the arguments quoted back in a refusal.
const maxGivenText = 512

// compileSchema compiles a tool's input schema (taskcontract.CompileSchema).
func compileSchema(s *structpb.Struct) (*inputSchema, error) {
	cs, err := taskcontract.CompileSchema(s)
	if err != nil {
		return nil, err
	}
	return &inputSchema{resolved: cs.Resolved, raw: cs.Raw, from: "its input schema"}, nil
}

// schemas compiles, once per run, the input schema of each granted tool:
// the grant's own, else the one the executor lists for it. The executor is
// listed once; a List error, or a listed schema that does not compile,
// means the tool has no schema (logged), not a failed run.
func (r *Stepper) schemas(ctx context.Context) map[string]*inputSchema {
	out := map[string]*inputSchema{}
	r.listedSchemas = map[string]*structpb.Struct{}
	var missing []string
	for _, g := range r.st.Contract.GetTools() {
		s := g.GetInputSchema()
		if s == nil {
			missing = append(missing, g.GetName())
			continue
		}
		is, err := compileSchema(s)
		if err != nil {
			// StartRun refuses such a contract; a run started before it
			// did keeps running without the check.
			r.h.Logger().Warn("a granted tool's input schema does not compile; its calls are not checked",
				"run_id", r.st.RunID, "tool", g.GetName(), "error", err)
			continue
		}
		is.from = "its input_schema in the contract"
		out[g.GetName()] = is
	}
	if len(missing) == 0 {
		return out
	}
	lctx, cancel := context.WithTimeout(ctx, r.cfg.ToolTimeout)
	defer cancel()
	specs, err := r.h.Tools().List(lctx)
	if err != nil {
		r.h.Logger().Warn("listing the tools failed; calls to tools the contract gives no schema are not checked",
			"run_id", r.st.RunID, "error", err)
		return out
	}
	for _, sp := range specs {
		if sp.InputSchema == nil || !slices.Contains(missing, sp.Name) || out[sp.Name] != nil {
			continue
		}
		is, err := compileSchema(sp.InputSchema)
		if err != nil {
			r.h.Logger().Warn("a listed tool's input schema does not compile; its calls are not checked",
				"run_id", r.st.RunID, "tool", sp.Name, "error", err)
			continue
		}
		is.from = "the input schema its tool lists"
		out[sp.Name] = is
		r.listedSchemas[sp.Name] = sp.InputSchema
	}
	return out
}

// modelTools are the grants as the model is shown them: a grant with no
// input_schema of its own carries the one its tool lists, the schema its
// calls are held to.
func (r *Stepper) modelTools() []*reinv1.ToolGrant {
	grants := r.st.Contract.GetTools()
	if len(r.listedSchemas) == 0 {
		return grants
	}
	out := make([]*reinv1.ToolGrant, len(grants))
	for i, g := range grants {
		out[i] = g
		if s, ok := r.listedSchemas[g.GetName()]; ok && g.GetInputSchema() == nil {
			cp := proto.Clone(g).(*reinv1.ToolGrant)
			cp.InputSchema = s
			out[i] = cp
		}
	}
	return out
}

// mismatch says how a call's arguments break the tool's schema, for the
// model, or "" when they match (or the tool has no schema: s is nil). The verdict is the validator's; the words
// are deterministic (replay compares them), so the common problems of an
// object's own fields are named here in sorted order, and the validator's
// message is used only when none of them is found.
func (s *inputSchema) mismatch(tool string, args *structpb.Struct) string {
	if s == nil {
		return ""
	}
	given := args.AsMap()
	err := s.resolved.Validate(given)
	if err == nil {
		return ""
	}
	problems := s.diagnose(given)
	if len(problems) == 0 {
		problems = []string{validatorText(err)}
	}
	g, _ := json.Marshal(given)
	return fmt.Sprintf("the arguments of tool %q do not match %s, so it was not run: %s; given: %s; call it again with arguments that match",
		tool, s.from, strings.Join(problems, "; "), CutText(string(g), maxGivenText))
}

// diagnose names, in a stable order, the missing required fields, the
// fields not allowed, and the fields of the wrong type, of an object
// checked against an object schema's own keywords.
func (s *inputSchema) diagnose(given map[string]any) []string {
	props, _ := s.raw["properties"].(map[string]any)
	var out []string
	var missing []string
	if req, ok := s.raw["required"].([]any); ok {
		for _, f := range req {
			if name, ok := f.(string); ok {
				if _, there := given[name]; !there {
					missing = append(missing, name)
				}
			}
		}
	}
	slices.Sort(missing)
	for _, name := range missing {
		out = append(out, fmt.Sprintf("field %q is required%s and missing", name, expected(props[name])))
	}
	names := slices.Sorted(maps.Keys(given))
	if s.raw["additionalProperties"] == false {
		var extra []string
		for _, name := range names {
			if _, ok := props[name]; !ok && !matchesPattern(s.raw, name) {
				extra = append(extra, strconv.Quote(name))
			}
		}
		if len(extra) > 0 {
			allowed := strings.Join(quoteAll(slices.Sorted(maps.Keys(props))), ", ")
			if allowed == "" {
				allowed = "none"
			}
			out = append(out, fmt.Sprintf("field(s) %s are not allowed (the fields allowed are: %s)", strings.Join(extra, ", "), allowed))
		}
	}
	for _, name := range names {
		sub, _ := props[name].(map[string]any)
		want := types(sub)
		if len(want) == 0 {
			continue
		}
		got := jsonType(given[name])
		if !slices.Contains(want, got) && !(got == "integer" && slices.Contains(want, "number")) {
			v, _ := json.Marshal(given[name])
			out = append(out, fmt.Sprintf("field %q%s, given %s (%s)", name, expected(sub), CutText(string(v), 80), article(got)))
		}
	}
	return out
}

// expected is " (expected a string)" for a property schema with a type,
// else "".
func expected(prop any) string {
	t := types(asMap(prop))
	if len(t) == 0 {
		return ""
	}
	return " (expected " + strings.Join(mapSlice(t, article), " or ") + ")"
}

func types(s map[string]any) []string {
	switch t := s["type"].(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, v := range t {
			if s, ok := v.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// jsonType is the JSON Schema type of a value of structpb's AsMap: a
// number with no fraction is an integer.
func jsonType(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case float64:
		if _, f := math.Modf(v); f == 0 {
			return "integer"
		}
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

func article(t string) string {
	switch t {
	case "array", "integer", "object":
		return "an " + t
	case "null":
		return "null"
	}
	return "a " + t
}

func matchesPattern(raw map[string]any, name string) bool {
	pp, _ := raw["patternProperties"].(map[string]any)
	for p := range pp {
		if re, err := regexp.Compile(p); err == nil && re.MatchString(name) {
			return true
		}
	}
	return false
}

// additionalRE finds the validator's list of fields not allowed, whose
// order is a map's.
var additionalRE = regexp.MustCompile(`unexpected additional properties \[([^\]]*)\]`)

// validatorText is the validator's message without its schema-path
// prefixes, with any list of fields sorted.
func validatorText(err error) string {
	msg := strings.ReplaceAll(err.Error(), "validating root: ", "")
	msg = strings.ReplaceAll(msg, "validating ", "at schema ")
	return additionalRE.ReplaceAllStringFunc(msg, func(m string) string {
		inner := additionalRE.FindStringSubmatch(m)[1]
		fields := strings.Fields(inner)
		slices.Sort(fields)
		return "unexpected additional properties [" + strings.Join(fields, " ") + "]"
	})
}

func asMap(v any) map[string]any { m, _ := v.(map[string]any); return m }

func quoteAll(ss []string) []string { return mapSlice(ss, strconv.Quote) }

func mapSlice(ss []string, f func(string) string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = f(s)
	}
	return out
}
