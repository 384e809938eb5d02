package bench

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func envInt(k string, d int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil {
		return v
	}
	return d
}

func TestZZExp(t *testing.T) {
	if os.Getenv("EXP") == "" {
		t.Skip()
	}
	p := newWatchPlan(envInt("RUNS", 64), envInt("STREAMS", 1000), envInt("CONNS", 8), envInt("PACED", 100), time.Duration(envInt("INTERVAL_US", 40000))*time.Microsecond, envInt("EVENTS", 200))
	ctx := context.Background()
	for i := 0; i < envInt("ROUNDS", 2); i++ {
		if os.Getenv("SKIPFIG") == "" {
			t0 := time.Now()
			f, err := watchFigure(ctx, p, filepath.Join(t.TempDir(), "f.db"))
			if err != nil {
				t.Fatal(err)
			}
			logRound(t, "figure  ", f, t0)
		}
		if os.Getenv("SKIPBASE") != "" {
			continue
		}
		t0 := time.Now()
		b, err := watchBaseline(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		logRound(t, "baseline", b, t0)
	}
}


func logRound(t *testing.T, name string, w watchRound, t0 time.Time) {
	t.Logf("%s unpaced %.0f/s span %.2fs | paced %.0f/s p50 %.2fms p99 %.2fms max %.1fms early %d | gaps %d dups %d (wall %.1fs)", name,
		w.unpaced.m.rate(), w.unpaced.m.elapsed.Seconds(), w.paced.m.rate(), ms(w.paced.p50), ms(w.paced.p99), ms(w.paced.max), w.paced.early, w.gaps, w.dups, time.Since(t0).Seconds())
}
