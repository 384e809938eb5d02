//go:build !failpoints

package failpoint

import (
	"os"
	"os/exec"
	"testing"
)

// TestInjectIsInertWithoutTheTag is on_test.go's twin for a build without
// the failpoints tag: a child armed as there runs past every hit and exits
// normally, REIN_FAILPOINTS notwithstanding.
func TestInjectIsInertWithoutTheTag(t *testing.T) {
	if os.Getenv("FAILPOINT_CHILD") == "1" {
		for i := 1; i <= 5; i++ {
			Inject("x")
			Inject(StoreBeforeCommit)
			os.Stdout.WriteString("passed\n")
		}
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=TestInjectIsInertWithoutTheTag")
	cmd.Env = append(os.Environ(), "FAILPOINT_CHILD=1", "REIN_FAILPOINTS=other,x@3,"+StoreBeforeCommit)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child exited with %v, want a normal exit: without the failpoints tag no point fires", err)
	}
	if got, want := string(out), "passed\npassed\npassed\npassed\npassed\n"; got != want {
		t.Fatalf("child printed %q, want %q", got, want)
	}
}
