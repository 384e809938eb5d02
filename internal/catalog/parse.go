package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"buf.build/go/protovalidate"
	"github.com/google/jsonschema-go/jsonschema"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/auth"
)

// The keys a task file adds to the task-file format (a TaskContract in
// protojson, as `rein run` reads it).
var taskKeys = []string{"name", "description", "input_schema", "tenants", "roles"}

// Parse reads one task file: a task contract in protojson (the format of
// `rein run`'s task files), with these keys besides the contract's:
//
//	"name":         the task's name (lower case, digits, _; at most 48)
//	"description":  what it does
//	"input_schema": the JSON Schema its inputs must meet (optional)
//	"tenants":      the tenants that may start it (optional: all)
//	"roles":        the roles that may see and start it (optional: any)
//
// A problem names the line it is on, where one applies.
func Parse(data []byte) (*Task, error) {
	spans, raw, err := topLevel(data)
	if err != nil {
		return nil, err
	}
	t := &Task{Digest: digest(data)}
	field := func(key string, into any) error {
		v, ok := raw[key]
		if !ok {
			return nil
		}
		dec := json.NewDecoder(bytes.NewReader(v))
		dec.DisallowUnknownFields()
		if err := dec.Decode(into); err != nil {
			return fmt.Errorf("line %d: %q: %v", lineAt(data, spans[key].start), key, err)
		}
		return nil
	}
	var schema map[string]any
	var roles []string
	for key, into := range map[string]any{"name": &t.Name, "description": &t.Description, "input_schema": &schema, "tenants": &t.Tenants, "roles": &roles} {
		if err := field(key, into); err != nil {
			return nil, err
		}
	}
	if !namePattern.MatchString(t.Name) {
		return nil, fmt.Errorf("line %d: \"name\" %q: give a name of 1 to 48 lower-case letters, digits and _", lineAt(data, spans["name"].start), t.Name)
	}
	for _, r := range roles {
		role := auth.Role(r)
		if !slices.Contains([]auth.Role{auth.Viewer, auth.Operator, auth.Approver, auth.Admin}, role) {
			return nil, fmt.Errorf("line %d: \"roles\": unknown role %q; use viewer, operator, approver or admin", lineAt(data, spans["roles"].start), r)
		}
		t.Roles = append(t.Roles, role)
	}
	if schema != nil {
		if t.InputSchema, err = structpb.NewStruct(schema); err != nil {
			return nil, fmt.Errorf("line %d: \"input_schema\": %v", lineAt(data, spans["input_schema"].start), err)
		}
		var s jsonschema.Schema
		if err := json.Unmarshal(raw["input_schema"], &s); err != nil {
			return nil, fmt.Errorf("line %d: \"input_schema\" is not a JSON Schema: %v", lineAt(data, spans["input_schema"].start), err)
		}
		if s.Type != "" && s.Type != "object" {
			return nil, fmt.Errorf("line %d: \"input_schema\" has type %q: the inputs are an object, so give \"type\": \"object\"", lineAt(data, spans["input_schema"].start), s.Type)
		}
		if t.schema, err = s.Resolve(nil); err != nil {
			return nil, fmt.Errorf("line %d: \"input_schema\" does not resolve: %v", lineAt(data, spans["input_schema"].start), err)
		}
	}
	// The contract is the file without the task's own keys, blanked in
	// place so that protojson's line numbers are the file's.
	contractJSON := bytes.Clone(data)
	for _, key := range taskKeys {
		if s, ok := spans[key]; ok {
			blank(contractJSON, s)
		}
	}
	c := &reinv1.TaskContract{}
	if err := protojson.Unmarshal(contractJSON, c); err != nil {
		return nil, fmt.Errorf("the task contract: %v", err)
	}
	if err := protovalidate.Validate(c); err != nil {
		return nil, fmt.Errorf("the task contract: %v", err)
	}
	t.contract = c
	return t, nil
}

// span is where a top-level member of the file lies: from its key's
// opening quote to the end of its value, with the comma that separates
// it from the next member (or the previous one, for the last).
type span struct{ start, end int }

// topLevel finds the members of the file's top-level object: where the
// task's own keys lie, and their values.
func topLevel(data []byte) (map[string]span, map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	syntax := func(err error) error {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return fmt.Errorf("line %d: not JSON: %v", lineAt(data, int(se.Offset)), err)
		}
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return fmt.Errorf("line %d: not JSON: the file ends inside its object", lineAt(data, len(data)))
		}
		return fmt.Errorf("not JSON: %v", err)
	}
	if tok, err := dec.Token(); err != nil {
		return nil, nil, syntax(err)
	} else if tok != json.Delim('{') {
		return nil, nil, fmt.Errorf("line 1: a task file is one JSON object")
	}
	spans := map[string]span{}
	raw := map[string]json.RawMessage{}
	for dec.More() {
		at := int(dec.InputOffset())
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, syntax(err)
		}
		key, _ := tok.(string)
		start := at + bytes.IndexByte(data[at:], '"')
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, syntax(err)
		}
		if !slices.Contains(taskKeys, key) {
			continue
		}
		if _, dup := spans[key]; dup {
			return nil, nil, fmt.Errorf("line %d: %q is given twice", lineAt(data, start), key)
		}
		spans[key] = span{start: start, end: int(dec.InputOffset())}
		raw[key] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, nil, syntax(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, fmt.Errorf("line %d: data after the task's object", lineAt(data, int(dec.InputOffset())))
	}
	if _, ok := raw["name"]; !ok {
		return nil, nil, fmt.Errorf("line 1: the task has no \"name\"; give one (lower case, digits and _)")
	}
	return spans, raw, nil
}

// blank replaces s, and the comma that joins it to its neighbour, with
// spaces, keeping line breaks.
func blank(data []byte, s span) {
	end := s.end
	for end < len(data) && isSpace(data[end]) {
		end++
	}
	start := s.start
	if end < len(data) && data[end] == ',' {
		end++
	} else {
		// The last member: take the comma before it instead.
		i := start - 1
		for i >= 0 && isSpace(data[i]) {
			i--
		}
		if i >= 0 && data[i] == ',' {
			start = i
		}
	}
	for i := start; i < end; i++ {
		if data[i] != '\n' {
			data[i] = ' '
		}
	}
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

// lineAt is the line (from 1) that offset falls on.
func lineAt(data []byte, offset int) int {
	offset = min(max(offset, 0), len(data))
	return bytes.Count(data[:offset], []byte("\n")) + 1
}
