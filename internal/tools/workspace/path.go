package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// resolve maps rel, a path the model gave, to the path of the file it names
// relative to root (which is absolute and has no symbolic links), following
// symbolic links in the part of the path that exists. It refuses an absolute
// path, a path that climbs out with "..", and a path whose existing part
// leads out of root through a symbolic link. The part that does not exist
// yet is kept as given (after Clean).
func resolve(root, rel string) (string, error) {
	if rel == "" {
		return "", errors.New("the path is empty; give a path relative to the workspace root, such as \"README.md\" or \".\"")
	}
	if filepath.IsAbs(rel) || strings.HasPrefix(rel, "/") || strings.HasPrefix(rel, `\`) {
		return "", fmt.Errorf("path %q is absolute; refused: give a path relative to the workspace root", rel)
	}
	clean := filepath.Clean(rel)
	if clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("path %q climbs out of the workspace root with \"..\"; refused: only files inside the workspace can be used", rel)
	}
	// Find the longest prefix that exists and resolve its links.
	p, rest := filepath.Join(root, clean), ""
	var real string
	for {
		r, err := filepath.EvalSymlinks(p)
		if err == nil {
			real = r
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("path %q: %w", rel, err)
		}
		if _, lerr := os.Lstat(p); lerr == nil {
			// p is there but does not resolve: a link to nowhere (or to
			// somewhere that may appear later, outside).
			return "", fmt.Errorf("path %q goes through a symbolic link whose target does not exist; refused", rel)
		}
		if p == root {
			return "", fmt.Errorf("the workspace root %s is gone", root)
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = filepath.Dir(p)
	}
	if !inside(root, real) {
		return "", fmt.Errorf("path %q leads out of the workspace root through a symbolic link; refused: only files inside the workspace can be used", rel)
	}
	in, err := filepath.Rel(root, filepath.Join(real, rest))
	if err != nil {
		return "", fmt.Errorf("path %q: %w", rel, err)
	}
	return in, nil
}

// inside reports whether path, absolute, is root or under it.
func inside(root, path string) bool {
	r, err := filepath.Rel(root, path)
	return err == nil && r != ".." && !strings.HasPrefix(r, ".."+string(filepath.Separator)) && !filepath.IsAbs(r)
}

// notFound is the error for a path that does not exist: it names the
// existing paths nearest to it, so the model can correct itself.
func notFound(root, rel string) error {
	near := nearest(root, rel, 5)
	if len(near) == 0 {
		return fmt.Errorf("no file or directory %q in the workspace; list it with fs.list {\"path\": \".\"}", rel)
	}
	return fmt.Errorf("no file or directory %q in the workspace; nearest existing paths: %s", rel, strings.Join(near, ", "))
}

// nearest returns up to n existing paths (relative to root, slash-separated)
// close to rel: the entries of its deepest existing directory, the most
// similar names first.
func nearest(root, rel string, n int) []string {
	dir := filepath.Dir(filepath.Clean(rel))
	for {
		if d, err := resolve(root, dir); err == nil {
			if info, err := os.Stat(filepath.Join(root, d)); err == nil && info.IsDir() {
				break
			}
		}
		if dir == "." || dir == string(filepath.Separator) {
			dir = "."
			break
		}
		dir = filepath.Dir(dir)
	}
	d, err := resolve(root, dir)
	if err != nil {
		return nil
	}
	entries, err := os.ReadDir(filepath.Join(root, d))
	if err != nil {
		return nil
	}
	want := strings.ToLower(filepath.Base(rel))
	type cand struct {
		path string
		dist int
	}
	var cands []cand
	for _, e := range entries {
		p := filepath.ToSlash(filepath.Join(dir, e.Name()))
		if e.IsDir() {
			p += "/"
		}
		cands = append(cands, cand{p, distance(want, strings.ToLower(e.Name()))})
	}
	sort.SliceStable(cands, func(i, j int) bool {
		if cands[i].dist != cands[j].dist {
			return cands[i].dist < cands[j].dist
		}
		return cands[i].path < cands[j].path
	})
	var out []string
	for i := 0; i < len(cands) && i < n; i++ {
		out = append(out, cands[i].path)
	}
	return out
}

// distance is the Levenshtein distance between a and b, by bytes.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
