// Package reinbin builds the rein binary that the process-level test
// suites (tests/crash, tests/failover) start as servers.
package reinbin

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Build builds ./cmd/rein of this module into out, with flags (such as
// -tags failpoints) before the package, within three minutes.
func Build(out string, flags ...string) error {
	_, here, _, ok := runtime.Caller(0)
	if !ok {
		return fmt.Errorf("build rein: cannot tell where the module is")
	}
	root := filepath.Join(filepath.Dir(here), "..", "..", "..")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := append(append([]string{"build", "-o", out}, flags...), "./cmd/rein")
	build := exec.CommandContext(ctx, "go", args...)
	build.Dir = root
	if b, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return nil
}
