//go:build failpoints

package failpoint

import (
	"os"
	"os/exec"
	"testing"
)

// TestInjectCrashesOnTheNthHit runs itself as a child process with the
// point armed: the child must exit with CrashCode on the third hit, not
// before. The twin: an unarmed point never fires.
func TestInjectCrashesOnTheNthHit(t *testing.T) {
	if os.Getenv("FAILPOINT_CHILD") == "1" {
		for i := 1; i <= 5; i++ {
			Inject("x")
			os.Stdout.WriteString("passed\n")
		}
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=TestInjectCrashesOnTheNthHit")
	cmd.Env = append(os.Environ(), "FAILPOINT_CHILD=1", "REIN_FAILPOINTS=other,x@3")
	out, err := cmd.Output()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != CrashCode {
		t.Fatalf("child exited with %v, want code %d", err, CrashCode)
	}
	if got := string(out); got != "passed\npassed\n" {
		t.Fatalf("child got past %q before crashing, want two hits", got)
	}
}

func TestUnarmedNeverFires(t *testing.T) {
	Arm("")
	for i := 0; i < 3; i++ {
		Inject(StoreBeforeCommit)
	}
	Arm("a@0, ,b")
	t.Cleanup(func() { Arm("") })
	mu.Lock()
	defer mu.Unlock()
	if points["a"] != 1 || points["b"] != 1 || len(points) != 2 {
		t.Fatalf("Arm parsed %v, want a and b armed for their first hit", points)
	}
}
