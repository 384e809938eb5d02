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

// Limits of a path. A path past them is refused before anything is looked
// up: resolving it costs one lookup per component, and a path the model
// made 2,000 components long has no file at the end of it.
const (
	maxPathBytes      = 1024 // bytes of a path as given
	maxPathComponents = 64   // names between its slashes
	maxLinks          = 40   // symbolic links followed in one path (Linux's own limit)
	maxResolveSteps   = 256  // components walked in all, those of the links' targets included
)

// Limits of the not-found hint.
const (
	maxHintEntries = 1000 // entries of the directory compared
	maxHintName    = 64   // bytes of a name compared
)

// resolution is where a path the model gave leads.
type resolution struct {
	// target is the file the path names, relative to the root, with the
	// symbolic links of its existing part followed; the part that does not
	// exist yet is kept as given (after Clean).
	target string
	// missing says the path does not exist in full. Then dir is the
	// deepest directory of it that does (resolved, relative to the root),
	// and given is the part of the path as the model gave it that names
	// dir ("" for the root).
	missing    bool
	dir, given string
}

// resolve maps rel, a path the model gave, to the file it names under root.
// It refuses an empty or absolute path, a path over the limits, a path
// that climbs out with "..", a path whose existing part leads out of the
// root through a symbolic link, a link whose target does not exist, and a
// path that goes on below a file.
//
// It walks down from the root one component at a time, each looked up in
// the directory reached so far (an os.Root opened on it), so the work is
// linear in the path: one lookup per component, plus those of the links'
// targets. A link's target is followed lexically from the link's directory
// (every directory on the way is a real one, so ".." is its parent); an
// absolute target must name a path under the root as the root is spelt.
func resolve(root *os.Root, rel string) (resolution, error) {
	if rel == "" {
		return resolution{}, errors.New("the path is empty; give a path relative to the workspace root, such as \"README.md\" or \".\"")
	}
	if len(rel) > maxPathBytes {
		return resolution{}, fmt.Errorf("the path %q is %d bytes long; refused: a path has at most %d bytes", clip(rel, 80), len(rel), maxPathBytes)
	}
	if filepath.IsAbs(rel) || strings.HasPrefix(rel, "/") || strings.HasPrefix(rel, `\`) {
		return resolution{}, fmt.Errorf("path %q is absolute; refused: give a path relative to the workspace root", rel)
	}
	clean := filepath.Clean(rel)
	if clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) {
		return resolution{}, fmt.Errorf("path %q climbs out of the workspace root with \"..\"; refused: only files inside the workspace can be used", rel)
	}
	var comps []string
	if clean != "." {
		comps = strings.Split(clean, string(filepath.Separator))
	}
	if len(comps) > maxPathComponents {
		return resolution{}, fmt.Errorf("the path %q has %d components; refused: a path has at most %d", clip(rel, 80), len(comps), maxPathComponents)
	}
	wk := &walker{top: root, rel: rel}
	defer wk.close()
	n, err := wk.follow(comps, false)
	if err != nil {
		return resolution{}, err
	}
	if n == len(comps) {
		return resolution{target: wk.path(wk.leaf)}, nil
	}
	return resolution{
		target:  filepath.Join(append([]string{wk.path()}, comps[n:]...)...),
		missing: true,
		dir:     wk.path(),
		given:   filepath.Join(comps[:n]...),
	}, nil
}

// walker is a walk down from the root: dirs[i] is the directory names[:i]
// names (dirs[0] the root itself), every one a real directory; leaf, when
// set, is a file (not a directory) in the last of them, where the walk
// ended.
type walker struct {
	top   *os.Root
	rel   string // the path as given, for errors
	dirs  []*os.Root
	names []string
	leaf  string
	links int
	steps int
}

func (w *walker) cur() *os.Root {
	if len(w.dirs) == 0 {
		return w.top
	}
	return w.dirs[len(w.dirs)-1]
}

// path is the walk's directory joined with extra, relative to the root.
func (w *walker) path(extra ...string) string {
	return filepath.Join(append(append([]string{"."}, w.names...), extra...)...)
}

func (w *walker) up() {
	w.dirs[len(w.dirs)-1].Close()
	w.dirs, w.names = w.dirs[:len(w.dirs)-1], w.names[:len(w.names)-1]
}

func (w *walker) close() {
	for len(w.dirs) > 0 {
		w.up()
	}
}

func (w *walker) leadsOut() error {
	return fmt.Errorf("path %q leads out of the workspace root through a symbolic link; refused: only files inside the workspace can be used", w.rel)
}

// follow walks comps down from the walk's directory and returns how many
// of them exist (all of them, or up to the first that does not). Within a
// link's target (inLink) a component that does not exist is an error: the
// link leads nowhere.
func (w *walker) follow(comps []string, inLink bool) (int, error) {
	for i, name := range comps {
		if w.steps++; w.steps > maxResolveSteps {
			return 0, fmt.Errorf("path %q takes more than %d steps to resolve through its symbolic links; refused", w.rel, maxResolveSteps)
		}
		if w.leaf != "" {
			return 0, fmt.Errorf("path %q goes on below %q, which is a file, not a directory", w.rel, filepath.ToSlash(w.path(w.leaf)))
		}
		switch name {
		case "", ".":
			continue
		case "..":
			if len(w.names) == 0 {
				return 0, w.leadsOut()
			}
			w.up()
			continue
		}
		info, err := w.cur().Lstat(name)
		switch {
		case errors.Is(err, fs.ErrNotExist) && inLink:
			return 0, fmt.Errorf("path %q goes through a symbolic link whose target does not exist; refused", w.rel)
		case errors.Is(err, fs.ErrNotExist):
			return i, nil
		case err != nil:
			return 0, fmt.Errorf("path %q: %s: %w", w.rel, filepath.ToSlash(w.path(name)), pathless(err))
		case info.Mode()&fs.ModeSymlink != 0:
			if err := w.link(name); err != nil {
				return 0, err
			}
		case info.IsDir():
			// "name/." so that os.Root opens name as a directory
			// (O_DIRECTORY): a FIFO swapped in since the Lstat fails at
			// once instead of holding the open.
			sub, err := w.cur().OpenRoot(name + string(filepath.Separator) + ".")
			if err != nil {
				return 0, fmt.Errorf("path %q: %s: %w", w.rel, filepath.ToSlash(w.path(name)), pathless(err))
			}
			w.dirs, w.names = append(w.dirs, sub), append(w.names, name)
		default:
			w.leaf = name
		}
	}
	return len(comps), nil
}

// link follows the symbolic link name in the walk's directory.
func (w *walker) link(name string) error {
	if w.links++; w.links > maxLinks {
		return fmt.Errorf("path %q goes through more than %d symbolic links; refused", w.rel, maxLinks)
	}
	target, err := w.cur().Readlink(name)
	if err != nil {
		return fmt.Errorf("path %q: %s: %w", w.rel, filepath.ToSlash(w.path(name)), pathless(err))
	}
	if filepath.IsAbs(target) {
		in, err := filepath.Rel(w.top.Name(), target)
		if err != nil || in == ".." || strings.HasPrefix(in, ".."+string(filepath.Separator)) {
			return w.leadsOut()
		}
		w.close()
		target = in
	}
	_, err = w.follow(strings.Split(target, string(filepath.Separator)), true)
	return err
}

// notFound is the error for a path that does not exist: it names the
// existing paths nearest to it, so the model can correct itself.
func notFound(root *os.Root, rel string) error {
	near := nearest(root, rel, 5)
	if len(near) == 0 {
		return fmt.Errorf("no file or directory %q in the workspace; list it with fs.list {\"path\": \".\"}", rel)
	}
	return fmt.Errorf("no file or directory %q in the workspace; nearest existing paths: %s", rel, strings.Join(near, ", "))
}

// nearest returns up to n existing paths (slash-separated, as the model
// gave the path) close to rel: the entries of its deepest existing
// directory, the most similar names first. The directory is read through
// root like every other access, and at most maxHintEntries of its entries
// are compared, each by its first maxHintName bytes, so the hint costs
// little whatever the path or the directory.
func nearest(root *os.Root, rel string, n int) []string {
	res, err := resolve(root, rel)
	if err != nil || !res.missing {
		return nil
	}
	f, info, err := openNode(root, res.dir, res.given)
	if err != nil {
		return nil
	}
	defer f.Close()
	if !info.IsDir() {
		return nil
	}
	entries, err := f.ReadDir(maxHintEntries)
	if err != nil && len(entries) == 0 {
		return nil
	}
	want := strings.ToLower(clip(filepath.Base(filepath.Clean(rel)), maxHintName))
	type cand struct {
		path string
		dist int
	}
	var cands []cand
	for _, e := range entries {
		p := filepath.ToSlash(filepath.Join(res.given, e.Name()))
		if e.IsDir() {
			p += "/"
		}
		cands = append(cands, cand{p, distance(want, strings.ToLower(clip(e.Name(), maxHintName)))})
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
