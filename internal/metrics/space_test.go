package metrics

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/mem"
)

// TestStoreSpace: rein_store_no_space is 1 while the store answers that it
// is out of space, and keeps that while the store does not answer at all;
// it is 0 while the store has room (the twin), before and after. The timed
// store gives the store it wraps back (Unwrap), which /readyz asks.
func TestStoreSpace(t *testing.T) {
	m := New()
	var answer error
	m.TrackStoreSpace(func(context.Context) error { return answer })
	gauge := func() string {
		t.Helper()
		mfs, err := m.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, mf := range mfs {
			if mf.GetName() == "rein_store_no_space" {
				fmt.Fprint(&b, mf.GetMetric()[0].GetGauge().GetValue())
			}
		}
		return b.String()
	}
	for _, step := range []struct {
		answer error
		want   string
	}{
		{nil, "0"},
		{fmt.Errorf("etcd: %w", store.ErrNoSpace), "1"},
		{fmt.Errorf("etcd: %w", store.ErrUnavailable), "1"}, // no answer: the last one holds
		{nil, "0"},
	} {
		answer = step.answer
		if got := gauge(); got != step.want {
			t.Fatalf("rein_store_no_space with the store answering %v = %q, want %s", step.answer, got, step.want)
		}
	}

	var nilMetrics *Metrics
	nilMetrics.TrackStoreSpace(func(context.Context) error { t.Fatal("a nil Metrics asked the store"); return nil })

	inner := mem.New()
	if u, ok := m.Store(inner).(interface{ Unwrap() store.Store }); !ok || u.Unwrap() != inner {
		t.Fatal("the timed store does not give back the store it wraps")
	}
}
