//go:build reinbench

package bench

import (
	"context"
	"encoding/json"
	"os"
	"testing"
)

// TestMCPSmall runs the mcp scenario at a tiny scale and checks that the
// result is well formed: both sides made their calls and the server's CPU
// was measured. It never asserts a speed. REIN_BIN names a built rein
// binary; without it the test builds one.
func TestMCPSmall(t *testing.T) {
	recoveryPrereqs(t)
	r, err := MCP(context.Background(), Options{Scale: 0.05, Rounds: 2, Dir: t.TempDir(), Rein: os.Getenv("REIN_BIN")})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(r)
	t.Logf("%s", out)
	if r.Scenario != "mcp" || r.Unit != "calls/cpu-s" || r.Target != mcpTarget {
		t.Errorf("scenario %q unit %q target %v", r.Scenario, r.Unit, r.Target)
	}
	if r.Rounds != 2 || len(r.Figures) != 2 || len(r.Baselines) != 2 {
		t.Errorf("rounds %d, figures %v, baselines %v; want 2 of each", r.Rounds, r.Figures, r.Baselines)
	}
	if r.Events != 200 || r.Extra["calls"] != 200 {
		t.Errorf("calls %d (extra %v), want 200", r.Events, r.Extra["calls"])
	}
	for _, k := range []string{"mcp_calls_per_s", "connect_calls_per_s", "mcp_client_cpu_us_per_call", "connect_client_cpu_us_per_call"} {
		if !(r.Extra[k] > 0) {
			t.Errorf("%s is %v, want > 0", k, r.Extra[k])
		}
	}
}

// TestMCPBadBinary: a binary that is not rein is an error naming the
// server's log, not a hang.
func TestMCPBadBinary(t *testing.T) {
	_, err := MCP(context.Background(), Options{Scale: 0.05, Rounds: 1, Dir: t.TempDir(), Rein: "/bin/false"})
	if err == nil {
		t.Fatal("the scenario ran on /bin/false")
	}
}
