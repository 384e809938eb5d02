package crash_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reinhq/rein/tests/internal/reinbin"

	"github.com/reinhq/rein/internal/failpoint"
)

// TestFailpointsNeedTheTag builds rein as it ships (no build tags) and
// checks that failpoints are not in it: the binary holds neither the name
// REIN_FAILPOINTS nor a symbol of internal/failpoint, and a run with
// REIN_FAILPOINTS armed at the first commit goes to its end. The twin is
// reinBin, built with -tags failpoints: it holds both, and the same run
// crashes at that commit.
func TestFailpointsNeedTheTag(t *testing.T) {
	plain := filepath.Join(t.TempDir(), "rein")
	if err := reinbin.Build(plain); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, bin string
		tagged    bool
	}{
		{"normal build", plain, false},
		{"tagged build", reinBin, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := os.ReadFile(tc.bin)
			if err != nil {
				t.Fatal(err)
			}
			if got := bytes.Contains(raw, []byte("REIN_FAILPOINTS")); got != tc.tagged {
				t.Errorf("the binary holds the string REIN_FAILPOINTS: %v, want %v", got, tc.tagged)
			}
			nm, err := exec.Command("go", "tool", "nm", tc.bin).Output()
			if err != nil {
				t.Fatalf("go tool nm: %v", err)
			}
			var syms []string
			for _, line := range strings.Split(string(nm), "\n") {
				if strings.Contains(line, "rein/internal/failpoint.") {
					syms = append(syms, strings.TrimSpace(line))
				}
			}
			if got := len(syms) > 0; got != tc.tagged {
				t.Errorf("the binary has internal/failpoint symbols %q; want some: %v", syms, tc.tagged)
			}

			examples := filepath.Join("..", "..", "examples", "invoice")
			cmd := exec.Command(tc.bin, "run", filepath.Join(examples, "task.json"),
				"--model", "script:"+filepath.Join(examples, "model.jsonl"),
				"--tools", "fixture:"+filepath.Join(examples, "tools.json"),
				"--db", filepath.Join(t.TempDir(), "rein.db"))
			cmd.Env = append(os.Environ(), "REIN_FAILPOINTS="+failpoint.StoreBeforeCommit)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err = cmd.Run()
			if tc.tagged {
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != failpoint.CrashCode {
					t.Fatalf("rein run armed with %s exited with %v, want code %d\nstderr:\n%s", failpoint.StoreBeforeCommit, err, failpoint.CrashCode, &stderr)
				}
				if want := "failpoint " + failpoint.StoreBeforeCommit + ": crashing"; !strings.Contains(stderr.String(), want) {
					t.Fatalf("rein run exited %d without saying %q\nstderr:\n%s", failpoint.CrashCode, want, &stderr)
				}
				return
			}
			if err != nil {
				t.Fatalf("rein run with REIN_FAILPOINTS set: %v, want the run carried to its end\nstderr:\n%s", err, &stderr)
			}
			var res struct{ Status string }
			if err := json.Unmarshal(stdout.Bytes(), &res); err != nil || res.Status != "completed" {
				t.Fatalf("rein run printed %q (%v), want a completed run", &stdout, err)
			}
		})
	}
}
