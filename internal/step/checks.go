package step

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/secret"
	"github.com/reinhq/rein/internal/tail"
	"github.com/reinhq/rein/internal/taskcontract"
)

// Limits of the completion checks.
const (
	checkTailLines = 40       // lines of a check's output kept in its result
	checkTailBytes = 16 << 10 // bytes of a check's output kept in its result
	checkOutputCap = 1 << 20  // bytes of a check's output held while it runs
	maxHashFiles   = 10000    // files hashed into workspace_hash
	checkWaitDelay = 2 * time.Second
)

// CheckWorkspace refuses checks that cannot run in workspace: there is
// none (""), or a check's directory leads out of it through a symbolic
// link. It returns a *taskcontract.FieldError.
func CheckWorkspace(workspace string, checks []*reinv1.Check) error {
	if len(checks) == 0 {
		return nil
	}
	if workspace == "" {
		return &taskcontract.FieldError{Field: "contract.checks", Description: "completion checks run in a workspace, and this rein has none: start rein with --workspace DIR"}
	}
	root, err := workspaceRoot(workspace)
	if err != nil {
		return &taskcontract.FieldError{Field: "contract.checks", Description: err.Error()}
	}
	for i, ch := range checks {
		if _, err := checkDir(root, ch.GetDir()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return &taskcontract.FieldError{Field: fmt.Sprintf("contract.checks[%d].dir", i), Description: err.Error()}
		}
	}
	return nil
}

// workspaceRoot is root made absolute, with its symbolic links resolved.
func workspaceRoot(root string) (string, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", fmt.Errorf("workspace root %s: %w", root, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("workspace root %s: %w", root, err)
	}
	return real, nil
}

// checkDir resolves a check's directory under root (absolute, no links) and
// refuses one that leads out of it.
func checkDir(root, dir string) (string, error) {
	clean := filepath.Clean(dir)
	if filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("directory %q is outside the workspace root", dir)
	}
	real, err := filepath.EvalSymlinks(filepath.Join(root, clean))
	if err != nil {
		return "", fmt.Errorf("directory %q: %w", dir, err)
	}
	rel, err := filepath.Rel(root, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return "", fmt.Errorf("directory %q leads out of the workspace root through a symbolic link; refused", dir)
	}
	return real, nil
}

// runChecks runs the contract's completion checks in the workspace, in
// order, and records their results and the workspace state they ran
// against. It returns ErrStopped if the driver stopped meanwhile.
func (r *Stepper) runChecks(ctx context.Context) (*reinv1.ChecksCompleted, error) {
	root, err := workspaceRoot(r.cfg.Workspace)
	if err != nil {
		return nil, err
	}
	cc := &reinv1.ChecksCompleted{}
	start := time.Now()
	defer func() { cc.Duration = durationpb.New(time.Since(start)) }()
	for _, ch := range r.st.Contract.GetChecks() {
		res := runCheck(ctx, root, ch, r.cfg.Secrets)
		if ctx.Err() != nil {
			return nil, ErrStopped
		}
		cc.Results = append(cc.Results, res)
	}
	cc.WorkspaceHash = workspaceHash(root)
	return cc, nil
}

// runCheck runs one check: its argv with no shell, in its directory, with
// only the allowlisted environment, cut at its timeout. Its output is
// redacted by secrets before its tail is taken, so that cutting the tail
// cannot leave part of a value behind (and the output held starts a line,
// where no value was cut): the check may print a key the contract let
// into its environment, or a file that holds one.
func runCheck(ctx context.Context, root string, ch *reinv1.Check, secrets *secret.Redactor) *reinv1.CheckResult {
	res := &reinv1.CheckResult{Name: ch.GetName(), ExitCode: -1}
	dir, err := checkDir(root, ch.GetDir())
	if err != nil {
		res.OutputTail = "the check did not run: " + err.Error()
		return res
	}
	timeout := taskcontract.DefaultCheckTimeout
	if d := ch.GetTimeout(); d != nil && d.AsDuration() > 0 {
		timeout = d.AsDuration()
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	argv := ch.GetArgv()
	cmd := exec.CommandContext(cctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = []string{}
	for _, name := range ch.GetEnv() {
		// A value that holds a server secret never enters a check: redacting
		// the output cannot catch a key the check prints cut or encoded.
		if v, ok := os.LookupEnv(name); ok && !secrets.Holds(v) {
			cmd.Env = append(cmd.Env, name+"="+v)
		}
	}
	out := &tail.Buffer{Max: checkOutputCap}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = checkWaitDelay
	err = cmd.Run()
	tail := tail.Lines(secrets.Redact(out.WholeLines()), checkTailLines, checkTailBytes)
	var exit *exec.ExitError
	switch {
	case cctx.Err() != nil && ctx.Err() == nil:
		tail = strings.TrimRight(tail, "\n")
		if tail != "" {
			tail += "\n"
		}
		tail += fmt.Sprintf("[timed out after %s; the check was killed]", timeout)
	case err == nil:
		res.Passed, res.ExitCode = true, 0
	case errors.As(err, &exit):
		res.ExitCode = int32(exit.ExitCode())
	default:
		tail = strings.TrimRight(tail, "\n")
		if tail != "" {
			tail += "\n"
		}
		tail += "the check could not run: " + err.Error()
	}
	res.OutputTail = tail
	return res
}

// workspaceHash is the SHA-256 (hex) of the workspace's regular files: their
// sorted relative paths and contents, .git skipped, at most maxHashFiles.
func workspaceHash(root string) string {
	var paths []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			if d.Name() == ".git" && p != root {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if len(paths) >= maxHashFiles {
			return filepath.SkipAll
		}
		rel, err := filepath.Rel(root, p)
		if err == nil {
			paths = append(paths, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(paths)
	h := sha256.New()
	var n [8]byte
	for _, p := range paths {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
		fh := sha256.New()
		if f, err := os.Open(filepath.Join(root, filepath.FromSlash(p))); err == nil {
			_, _ = io.Copy(fh, f)
			_ = f.Close()
		}
		h.Write(fh.Sum(nil))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// finish handles a final answer in a run with completion checks: all pass →
// completed; a failure is an observation and the loop goes on, unless the
// same failure came back NoProgressSteps times in a row with no committed
// write between them (no_progress).
func (r *Stepper) finish(ctx context.Context, answer *reinv1.FinalAnswer, returned *reinv1.Event) error {
	if r.cfg.Workspace == "" {
		return r.end(ctx, reinv1.RunStatus_RUN_STATUS_FAILED, "checks_unavailable", &reinv1.StatusChanged{
			Error: "the run has completion checks, but this rein has no workspace to run them in: start rein with --workspace DIR",
		}, returned)
	}
	cc, err := r.runChecks(ctx)
	if err != nil {
		if errors.Is(err, ErrStopped) {
			return err
		}
		return r.end(ctx, reinv1.RunStatus_RUN_STATUS_FAILED, "checks_unavailable", &reinv1.StatusChanged{
			Error: "the completion checks could not run: " + err.Error(),
		}, returned)
	}
	checked := &reinv1.Event{Actor: "harness", Payload: &reinv1.Event_ChecksCompleted{ChecksCompleted: cc}}
	key := runstate.ChecksHash(cc)
	if key == "" {
		return r.end(ctx, reinv1.RunStatus_RUN_STATUS_COMPLETED, "final_answer", &reinv1.StatusChanged{Result: answer}, returned, checked)
	}
	same := 1
	if key == r.st.FailingChecks {
		same = int(r.st.FailingChecksRepeated) + 1
	}
	if n := r.cfg.NoProgressSteps; same >= n {
		return r.end(ctx, reinv1.RunStatus_RUN_STATUS_BUDGET_EXHAUSTED, "no_progress", &reinv1.StatusChanged{}, returned, checked,
			&reinv1.Event{Actor: "harness", Payload: &reinv1.Event_BudgetReached{BudgetReached: &reinv1.BudgetReached{
				Limit:  "no_progress",
				Detail: fmt.Sprintf("the completion checks failed the same way %d times in a row with no committed write", same),
			}}})
	}
	return r.commit(ctx, returned, checked)
}
