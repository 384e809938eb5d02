//go:build reinbench

package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reinhq/rein/internal/s3test"
)

// lifecycleSmall is the lifecycle scenario's smallest useful size: two
// runs a round archived, six rounds of two runs for the size series.
const lifecycleSmall = 0.01

// TestLifecycleSmall runs the lifecycle scenario at a tiny size and checks
// the report's shape: every figure there, sizes that say what the
// lifecycle does, and a plot that is well-formed SVG with a polyline per
// series. It asserts no speed.
func TestLifecycleSmall(t *testing.T) {
	o := small(t, lifecycleSmall)
	plot := filepath.Join(t.TempDir(), "size.svg")
	r, err := RunLifecycle(context.Background(), o, Lifecycle{SVG: plot})
	if err != nil {
		t.Fatal(err)
	}
	if r.Scenario != "lifecycle" || !r.Temporary || !strings.HasPrefix(r.Archive, "file://") || r.Rounds != 2 || !(r.Seconds > 0) {
		t.Errorf("scenario %q, archive %q (temporary %v), rounds %d, seconds %v", r.Scenario, r.Archive, r.Temporary, r.Rounds, r.Seconds)
	}

	th := r.Throughput
	if th.Unit != "runs/s" || th.Runs < 2 || th.Events < 20 || !(th.BlobBytes > 1024) || !(th.ExportBytes > th.BlobBytes) || !(th.ExportMs > 0) {
		t.Errorf("throughput: unit %q, %d runs a round of %v events, %v export bytes, %v of blobs, export %v ms",
			th.Unit, th.Runs, th.Events, th.ExportBytes, th.BlobBytes, th.ExportMs)
	}
	if len(th.Figures) != 2 || len(th.Baselines) != 2 || len(th.Ratios) != 2 {
		t.Fatalf("figures %v, baselines %v, ratios %v; want a rate of each side and a ratio a round", th.Figures, th.Baselines, th.Ratios)
	}
	if !(th.Figure > 0) || !(th.Baseline > 0) || th.Figure != median(th.Figures) || th.Baseline != median(th.Baselines) || th.Ratio != median(th.Ratios) {
		t.Errorf("figure %v, baseline %v, ratio %v; want the medians of %v, %v, %v", th.Figure, th.Baseline, th.Ratio, th.Figures, th.Baselines, th.Ratios)
	}
	if th.Target != lifecycleTarget || th.Met != (th.Ratio >= th.Target) {
		t.Errorf("met %v with ratio %v and target %v", th.Met, th.Ratio, th.Target)
	}

	if len(r.Reads) != 6 {
		t.Fatalf("%d read latencies, want GetRun and ListEvents on three kinds of run: %+v", len(r.Reads), r.Reads)
	}
	kinds := map[string]bool{}
	for _, x := range r.Reads {
		kinds[x.RPC+" "+x.Run] = true
		if x.Samples < 1 || !(x.P50Ms > 0) || x.P99Ms < x.P50Ms {
			t.Errorf("%s on a run %s: %d samples, p50 %v ms, p99 %v ms", x.RPC, x.Run, x.Samples, x.P50Ms, x.P99Ms)
		}
	}
	for _, rpc := range []string{"GetRun", "ListEvents"} {
		for _, kind := range []string{readLive, readArchivedCold, readArchivedWarm} {
			if !kinds[rpc+" "+kind] {
				t.Errorf("no latency of %s on a run %s", rpc, kind)
			}
		}
	}

	s := r.Size
	if s.RunsPerRound < 2 || len(s.Series) != 2 {
		t.Fatalf("size: %d runs a round, %d series; want 2 series", s.RunsPerRound, len(s.Series))
	}
	none, kept := s.Series[0], s.Series[1]
	if none.Lifecycle || !kept.Lifecycle || none.Name == kept.Name {
		t.Errorf("series %q (lifecycle %v) and %q (%v); want the one without a lifecycle first", none.Name, none.Lifecycle, kept.Name, kept.Lifecycle)
	}
	if len(none.Bytes) != len(kept.Bytes) || len(none.Bytes) < lifecycleRetainRounds+3 {
		t.Fatalf("series of %d and %d sizes, want the same count, more than the retention's rounds", len(none.Bytes), len(kept.Bytes))
	}
	if none.Archived != 0 || none.Deleted != 0 || kept.Archived != s.RunsPerRound*(len(kept.Bytes)-1) || kept.Deleted == 0 {
		t.Errorf("without a lifecycle %d archived, %d deleted; with one %d archived (want every run), %d deleted", none.Archived, none.Deleted, kept.Archived, kept.Deleted)
	}
	if none.Scrubs != 0 || kept.Scrubs == 0 || !(kept.ScrubMs > 0) || kept.ScrubMaxMs < kept.ScrubMs {
		t.Errorf("without a lifecycle %d scrubs; with one %d scrubs of %v ms (longest %v); want none, then some timed", none.Scrubs, kept.Scrubs, kept.ScrubMs, kept.ScrubMaxMs)
	}
	last := len(none.Bytes) - 1
	if none.Bytes[last] <= none.Bytes[0] || kept.Bytes[last] >= none.Bytes[last] {
		t.Errorf("sizes without a lifecycle %v, with one %v; want the first to grow and the second to end smaller", none.Bytes, kept.Bytes)
	}

	data, err := os.ReadFile(plot)
	if err != nil {
		t.Fatal(err)
	}
	checkSVG(t, data, 2)

	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"archive throughput: Keeper.Sweep", "GetRun     archived, cold cache", "ListEvents live", seriesNone + ":", "plot: " + plot} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("the text lacks %q:\n%s", want, text.String())
		}
	}
	js, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"archive_throughput":`, `"reads":`, `"live_store_size":`, `"p99_ms":`, `"bytes":`} {
		if !bytes.Contains(js, []byte(key)) {
			t.Errorf("the JSON lacks %s: %s", key, js)
		}
	}
	if left, _ := os.ReadDir(o.Dir); len(left) != 0 {
		t.Errorf("%d files left in the temporary directory", len(left))
	}
}

// checkSVG parses data as XML to its end and checks it is an svg element
// holding polylines polylines, each with points.
func checkSVG(t *testing.T, data []byte, polylines int) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(data))
	root, n := "", 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the plot is not well-formed XML: %v\n%s", err, data)
		}
		el, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		if root == "" {
			root = el.Name.Local
		}
		if el.Name.Local == "polyline" {
			n++
			for _, a := range el.Attr {
				if a.Name.Local == "points" && len(strings.Fields(a.Value)) < 2 {
					t.Errorf("a polyline of %q", a.Value)
				}
			}
		}
	}
	if root != "svg" || n != polylines {
		t.Errorf("root element %q with %d polylines, want svg with %d", root, n, polylines)
	}
}

// TestLifecycleRefuses: a store without a lifecycle, or an archive that is
// no blob store, fails the scenario, and it leaves no file behind.
func TestLifecycleRefuses(t *testing.T) {
	for name, c := range map[string]struct {
		be      Backend
		archive string
		want    string
	}{
		"no lifecycle": {be: Backend{Name: "plain", Open: func(path string, noSync bool) (Store, error) {
			s, err := boltBackend().Open(path, noSync)
			return struct{ Store }{s}, err
		}}, want: "has no lifecycle"},
		"unknown archive": {be: boltBackend(), archive: "ftp://example.invalid/runs", want: "unknown scheme"},
	} {
		t.Run(name, func(t *testing.T) {
			o := small(t, lifecycleSmall)
			o.Backend = c.be
			_, err := RunLifecycle(context.Background(), o, Lifecycle{Archive: c.archive})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want one saying %q", err, c.want)
			}
			if left, _ := os.ReadDir(o.Dir); len(left) != 0 {
				t.Errorf("%d files left in the temporary directory", len(left))
			}
		})
	}
}

// TestLifecycleS3 measures a real S3 server's archive, as an operator's
// --archive s3://… does, and checks the bench leaves its bucket empty.
func TestLifecycleS3(t *testing.T) {
	srv := s3test.Start(t)
	srv.Setenv(t)
	r, err := RunLifecycle(context.Background(), small(t, lifecycleSmall), Lifecycle{Archive: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	if r.Temporary || !strings.HasPrefix(r.Archive, "s3://") || !(r.Throughput.Baseline > 0) {
		t.Errorf("archive %q (temporary %v), baseline %v", r.Archive, r.Temporary, r.Throughput.Baseline)
	}
	var left []string
	_ = filepath.WalkDir(filepath.Join(srv.Dir, srv.Bucket), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			left = append(left, p)
		}
		return nil
	})
	if len(left) != 0 {
		t.Errorf("the bucket still holds %v", left)
	}
}
