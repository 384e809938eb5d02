package evaluate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/reinhq/rein/internal/tail"
)

// Limits of the workspace checks' output in a failure.
const (
	checkTailLines = 10       // lines of a failed check's output in its failure
	checkTailBytes = 4 << 10  // bytes of them at most
	checkOutputCap = 64 << 10 // bytes of a check's output held while it runs
	checkWaitDelay = 2 * time.Second
)

// CheckWorkspace reports whether src can be a case's workspace: a
// directory (a symbolic link to one is followed) holding only regular files
// and directories. Errors name the offending path.
func CheckWorkspace(src string) error {
	return walkWorkspace(src, func(string, string, fs.DirEntry) error { return nil })
}

// CopyWorkspace copies the workspace src into dst, which must not exist
// yet: directories, and regular files with their permission bits. A
// symbolic link or any other kind of file in src is refused, naming it;
// what was copied before stays in dst for the caller to remove.
func CopyWorkspace(src, dst string) error {
	return walkWorkspace(src, func(path, rel string, d fs.DirEntry) error {
		info, err := d.Info()
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			// Writable by rein, so that it can fill and remove it.
			return os.Mkdir(to, info.Mode().Perm()|0o700)
		}
		return copyFile(path, to, info.Mode().Perm())
	})
}

// walkWorkspace calls visit for src's root ("." as rel) and every
// directory and regular file under it, parents first, and refuses any other
// kind of entry.
func walkWorkspace(src string, visit func(path, rel string, d fs.DirEntry) error) error {
	info, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("workspace %s: %w", src, err)
	}
	if !info.IsDir() {
		return fmt.Errorf("workspace %s is not a directory", src)
	}
	root, err := filepath.EvalSymlinks(src)
	if err != nil {
		return fmt.Errorf("workspace %s: %w", src, err)
	}
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("workspace %s: %w", src, err)
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return fmt.Errorf("workspace %s: %w", src, err)
		}
		switch t := d.Type(); {
		case t&fs.ModeSymlink != 0:
			return fmt.Errorf("workspace %s: %s is a symbolic link; a case's workspace may hold only regular files and directories", src, filepath.ToSlash(rel))
		case !d.IsDir() && !t.IsRegular():
			return fmt.Errorf("workspace %s: %s is not a regular file or a directory (%s); a case's workspace may hold only those", src, filepath.ToSlash(rel), t)
		}
		if err := visit(path, rel, d); err != nil {
			return fmt.Errorf("copy workspace %s: %w", src, err)
		}
		return nil
	})
}

func copyFile(from, to string, perm fs.FileMode) (err error) {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	_, err = io.Copy(out, in)
	return err
}

// GradeWorkspace checks e's files and runs its workspace checks in root, a
// trial's final workspace, and returns why it fails; none means it passes.
// Files are read through an os.Root, so no path leaves root, not even
// through a symbolic link a check made.
func GradeWorkspace(ctx context.Context, e Expect, root string) []string {
	var fails []string
	if len(e.Files) > 0 {
		fails = append(fails, gradeFiles(e.Files, root)...)
	}
	for _, ch := range e.WorkspaceChecks {
		if f := runCheck(ctx, root, ch); f != "" {
			fails = append(fails, f)
		}
	}
	return fails
}

func gradeFiles(files map[string]string, root string) []string {
	r, err := os.OpenRoot(root)
	if err != nil {
		return []string{fmt.Sprintf("the workspace could not be read: %v", err)}
	}
	defer func() { _ = r.Close() }()
	var fails []string
	for _, p := range slices.Sorted(maps.Keys(files)) {
		want := files[p]
		name := filepath.FromSlash(p)
		info, err := r.Stat(name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			fails = append(fails, fmt.Sprintf("file %s does not exist", p))
			continue
		case err != nil:
			fails = append(fails, fmt.Sprintf("file %s: %v", p, err))
			continue
		case !info.Mode().IsRegular():
			fails = append(fails, fmt.Sprintf("file %s is not a regular file (%s)", p, info.Mode().Type()))
			continue
		}
		if want == "" {
			continue
		}
		data, err := r.ReadFile(name)
		if err != nil {
			fails = append(fails, fmt.Sprintf("file %s: %v", p, err))
			continue
		}
		if !strings.Contains(string(data), want) {
			fails = append(fails, fmt.Sprintf("file %s does not contain %q", p, want))
		}
	}
	return fails
}

// runCheck runs one workspace check and returns its failure, or "" if it
// exited 0.
func runCheck(ctx context.Context, root string, ch WorkspaceCheck) string {
	what := fmt.Sprintf("workspace check %q (%s)", ch.Name, strings.Join(ch.Argv, " "))
	dir, err := checkDir(root, ch.Dir)
	if err != nil {
		return fmt.Sprintf("%s did not run: %v", what, err)
	}
	timeout := ch.Limit()
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, ch.Argv[0], ch.Argv[1:]...)
	cmd.Dir = dir
	out := &tail.Buffer{Max: checkOutputCap}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = checkWaitDelay
	err = cmd.Run()
	var exit *exec.ExitError
	var why string
	switch {
	case err == nil:
		return ""
	case cctx.Err() != nil && ctx.Err() == nil:
		why = fmt.Sprintf("timed out after %s and was killed", timeout)
	case ctx.Err() != nil:
		why = "was interrupted"
	case errors.As(err, &exit):
		why = fmt.Sprintf("exited %d", exit.ExitCode())
	default:
		why = fmt.Sprintf("could not run: %v", err)
	}
	tail := tail.Lines(out.String(), checkTailLines, checkTailBytes)
	if tail == "" {
		return fmt.Sprintf("%s %s, with no output", what, why)
	}
	return fmt.Sprintf("%s %s; the last of its output:\n%s", what, why, tail)
}

// checkDir is a check's directory under root; it must exist and, symbolic
// links resolved, stay inside root.
func checkDir(root, dir string) (string, error) {
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", fmt.Errorf("the workspace: %w", err)
	}
	real, err := filepath.EvalSymlinks(filepath.Join(realRoot, filepath.FromSlash(dir)))
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("directory %q does not exist in the workspace", dir)
	}
	if err != nil {
		return "", fmt.Errorf("directory %q: %w", dir, err)
	}
	rel, err := filepath.Rel(realRoot, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("directory %q leads out of the workspace through a symbolic link", dir)
	}
	info, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("directory %q: %w", dir, err)
	}
	if !info.IsDir() {
		return "", fmt.Errorf("%q is not a directory", dir)
	}
	return real, nil
}
