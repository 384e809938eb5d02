// Package layering_test checks the direction of rein's imports
// (docs/architecture.md): the server is assembled from what lies under
// internal/, so no code under internal/ that a binary could compile in
// imports github.com/reinhq/rein/server or a package beneath it. A
// package that drives a server (rein-bench's scenarios, the faces' test
// node) lives above it instead: cmd/rein-bench/bench, server/facetest.
package layering_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// serverPath is the import path no file under internal/ may name.
const serverPath = "github.com/reinhq/rein/server"

// TestInternalDoesNotImportServer parses every Go file under internal/
// that is not a _test.go file, whatever its build tags (reinbench,
// failpoints), and fails on each import of the server.
func TestInternalDoesNotImportServer(t *testing.T) {
	found := serverImports(t, filepath.Join("..", "..", "internal"))
	for _, f := range found {
		t.Errorf("%s imports %s: code under internal/ lies below the server; move what drives a server above it (as cmd/rein-bench/bench and server/facetest are) or put it in a _test.go file", f.file, f.path)
	}
}

// TestServerImportIsFound is the twin: a file under a directory like
// internal/ that imports the server, or a package beneath it, is found,
// and a _test.go file that does is not.
func TestServerImportIsFound(t *testing.T) {
	root := t.TempDir()
	write := func(name, src string) {
		t.Helper()
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a/a.go", "//go:build reinbench\n\npackage a\n\nimport _ \"github.com/reinhq/rein/server\"\n")
	write("b/b.go", "package b\n\nimport (\n\t\"fmt\"\n\tft \"github.com/reinhq/rein/server/facetest\"\n)\n")
	write("c/c_test.go", "package c\n\nimport \"github.com/reinhq/rein/server\"\n")
	write("d/d.go", "package d\n\nimport \"github.com/reinhq/rein/serverless\"\n")
	found := serverImports(t, root)
	var got []string
	for _, f := range found {
		rel, _ := filepath.Rel(root, f.file)
		got = append(got, filepath.ToSlash(rel)+" "+f.path)
	}
	want := []string{"a/a.go github.com/reinhq/rein/server", "b/b.go github.com/reinhq/rein/server/facetest"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("found:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// serverImport is one import of the server found in one file.
type serverImport struct {
	file, path string
}

// serverImports walks root and returns, in the walk's order, each import
// of serverPath or a package beneath it in a Go file that is not a
// _test.go file.
func serverImports(t *testing.T, root string) []serverImport {
	t.Helper()
	var found []serverImport
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			if p == serverPath || strings.HasPrefix(p, serverPath+"/") {
				found = append(found, serverImport{file: path, path: p})
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walking %s: %v", root, err)
	}
	return found
}
