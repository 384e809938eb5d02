package workspace

import (
	"fmt"

	"google.golang.org/protobuf/types/known/structpb"
)

type spec struct {
	name, description string
	schema            map[string]any
}

func object(required []any, props map[string]any) map[string]any {
	return map[string]any{"type": "object", "properties": props, "required": required}
}

func prop(typ, description string) map[string]any {
	return map[string]any{"type": typ, "description": description}
}

var specs = []spec{
	{"fs.read", "Read a text file of the workspace, 64 KiB at a time by default; a cut result says the offset to read the rest from.",
		object([]any{"path"}, map[string]any{
			"path":   prop("string", "path relative to the workspace root"),
			"offset": prop("integer", "byte offset to start at (default 0)"),
			"limit":  prop("integer", "bytes to read (default 65536, at most 1048576)"),
		})},
	{"fs.list", "List a directory of the workspace: name, whether it is a directory, size.",
		object([]any{}, map[string]any{"path": prop("string", "directory relative to the workspace root (default \".\")")})},
	{"fs.search", "Find the lines that contain a substring (not a regular expression) in the workspace's text files; at most 100 matches.",
		object([]any{"pattern"}, map[string]any{
			"pattern": prop("string", "the text to find, exactly"),
			"path":    prop("string", "file or directory to search (default \".\")"),
		})},
	{"fs.write", "Write a whole file of the workspace (created if missing); proposed as a diff, applied after approval if the file has not changed.",
		object([]any{"path", "content"}, map[string]any{
			"path":    prop("string", "path relative to the workspace root"),
			"content": prop("string", "the file's whole new content"),
		})},
	{"fs.patch", "Replace exactly one occurrence of old with new in a file of the workspace; proposed as a diff, applied after approval if the file has not changed.",
		object([]any{"path", "old", "new"}, map[string]any{
			"path": prop("string", "path relative to the workspace root"),
			"old":  prop("string", "the text to replace; must occur exactly once"),
			"new":  prop("string", "the replacement"),
		})},
}

// stringArg is the string argument name, def when absent; a "" def makes
// it required and not empty.
func stringArg(args map[string]*structpb.Value, name, def string) (string, error) {
	v, ok := args[name]
	if !ok || isNull(v) {
		if def == "" {
			return "", fmt.Errorf("%s is required", name)
		}
		return def, nil
	}
	s, ok := v.GetKind().(*structpb.Value_StringValue)
	if !ok {
		return "", fmt.Errorf("%s must be a string", name)
	}
	if s.StringValue == "" && def == "" {
		return "", fmt.Errorf("%s must not be empty", name)
	}
	return s.StringValue, nil
}

func isNull(v *structpb.Value) bool {
	_, ok := v.GetKind().(*structpb.Value_NullValue)
	return ok
}

// intArg is the integer argument name; def when absent.
func intArg(args map[string]*structpb.Value, name string, def int64) (int64, error) {
	v, ok := args[name]
	if !ok || isNull(v) {
		return def, nil
	}
	n, ok := v.GetKind().(*structpb.Value_NumberValue)
	if !ok || n.NumberValue != float64(int64(n.NumberValue)) {
		return 0, fmt.Errorf("%s must be a whole number", name)
	}
	return int64(n.NumberValue), nil
}
