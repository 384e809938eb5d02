//go:build reinbench

package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// TestScrapeMetrics: the scale scenario reads unlabelled samples off a
// replica's /metrics. The twin: a metric the replica does not serve (a
// rein built before it) is an error naming it.
func TestScrapeMetrics(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "# HELP rein_steps_total Steps taken.\n# TYPE rein_steps_total counter\nrein_steps_total 42\n"+
			"rein_runs{status=\"running\"} 3\nrein_etcd_received_bytes_total 1.5e+06\n")
	}))
	defer hs.Close()
	admin := strings.TrimPrefix(hs.URL, "http://")
	got, err := scrapeMetrics(context.Background(), admin, "rein_steps_total", "rein_etcd_received_bytes_total")
	if err != nil || got["rein_steps_total"] != 42 || got["rein_etcd_received_bytes_total"] != 1.5e6 {
		t.Fatalf("scrape = %v, %v; want 42 steps and 1.5e6 bytes", got, err)
	}
	if _, err := scrapeMetrics(context.Background(), admin, "rein_steps_total", "rein_absent_total"); err == nil || !strings.Contains(err.Error(), "rein_absent_total") {
		t.Fatalf("scrape of a metric not served: %v; want an error naming it", err)
	}
}

// TestProcCPUMs: a process's CPU grows with the work it does, at a
// resolution finer than a tick where the kernel keeps its threads' run
// time. The twin: a process that does not exist is an error.
func TestProcCPUMs(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	before, res, err := procCPUMs(os.Getpid())
	if err != nil || res <= 0 {
		t.Fatalf("procCPUMs = %v, %v, %v", before, res, err)
	}
	for round, after := 0, before; after-before < 2*res+20; round++ {
		if round == 1000 {
			t.Fatalf("the CPU stayed at %v ms through a second's work or more", after)
		}
		for i := range 100_000 {
			_ = fmt.Sprint(i)
		}
		if after, _, err = procCPUMs(os.Getpid()); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := procCPUMs(1 << 30); err == nil {
		t.Fatal("procCPUMs of no process: no error")
	}
}
