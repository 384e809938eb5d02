package bench

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strings"
)

// WriteText writes the result for a person: the archiving's throughput
// against the raw puts, the reads' latencies, and the size series.
func (r LifecycleResult) WriteText(w io.Writer) error {
	var b strings.Builder
	where := r.Archive
	if r.Temporary {
		where += " (the bench's temporary directory)"
	}
	fmt.Fprintf(&b, "lifecycle: archive %s; %.1fs\n", where, r.Seconds)

	t := r.Throughput
	verdict := "met"
	if !t.Met {
		verdict = fmt.Sprintf("BELOW the target of %.2f", t.Target)
	}
	fmt.Fprintf(&b, "archive throughput: Keeper.Sweep %.0f %s, baseline (Archive.Put of the same export bytes, same archive) %.0f %s, ratio %.2f (target ≥ %.2f, %s)\n",
		t.Figure, t.Unit, t.Baseline, t.Unit, t.Ratio, t.Target, verdict)
	fmt.Fprintf(&b, "  medians of %d rounds, sides alternating, %d finished runs a round (%.0f events, %s export, %s of blobs each); sweep %s, put %s, ratios %s\n",
		len(t.Figures), t.Runs, t.Events, kibText(t.ExportBytes), kibText(t.BlobBytes), rateList(t.Figures, "%.0f"), rateList(t.Baselines, "%.0f"), rateList(t.Ratios, "%.2f"))
	if t.Figure > 0 && t.Baseline > 0 {
		fmt.Fprintf(&b, "  a run: %.1f ms archived against %.1f ms put; making its export (reading its log and blobs, encoding) takes %.1f ms, the rest is mostly the store's commit of its stub\n",
			1000/t.Figure, 1000/t.Baseline, t.ExportMs)
	}

	fmt.Fprintf(&b, "reads through the gRPC server (loopback TCP), p50 / p99; live: a finished run still in the live store; cold: the first read of an archived run since the server opened its archive; warm: read before, from the archive's cache:\n")
	for _, x := range r.Reads {
		fmt.Fprintf(&b, "  %-10s %-21s %7.3f / %7.3f ms  (%d calls)\n", x.RPC, readKinds[x.Run], x.P50Ms, x.P99Ms, x.Samples)
	}

	s := r.Size
	fmt.Fprintf(&b, "live store size (the bbolt file, MiB) before the first round and after each of %d runs started and finished:\n", s.RunsPerRound)
	for _, x := range s.Series {
		mib := make([]float64, len(x.Bytes))
		for i, v := range x.Bytes {
			mib[i] = float64(v) / (1 << 20)
		}
		fmt.Fprintf(&b, "  %-38s %s", x.Name+":", rateList(mib, "%.2f"))
		if x.Archived > 0 || x.Deleted > 0 {
			fmt.Fprintf(&b, " (%d archived, %d deleted)", x.Archived, x.Deleted)
		}
		if x.Scrubs > 0 {
			fmt.Fprintf(&b, "; erasure: %d rewrites of the file after deletions, %.1f ms each (median, longest %.1f ms), nothing a step", x.Scrubs, x.ScrubMs, x.ScrubMaxMs)
		}
		b.WriteString("\n")
	}
	if r.SVG != "" {
		fmt.Fprintf(&b, "  plot: %s\n", r.SVG)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func kibText(v float64) string { return fmt.Sprintf("%.1f KiB", v/1024) }

func rateList(vs []float64, format string) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = fmt.Sprintf(format, v)
	}
	return "[" + strings.Join(s, " ") + "]"
}

// The plot's frame, in SVG user units.
const (
	svgWidth, svgHeight = 720, 400
	plotLeft, plotRight = 72, 700
	plotTop, plotBottom = 48, 336
)

// seriesColours are the polylines' colours, in the order of the series.
var seriesColours = [...]string{"#c0392b", "#2471a3", "#7d3c98", "#1e8449"}

// sizeSVG plots the size series: MiB against rounds, a polyline per series,
// with axes, ticks, a title and a legend. It is plain SVG 1.1, written by
// hand.
func sizeSVG(s SizeSeries) []byte {
	rounds, top := 1, 0.0
	for _, x := range s.Series {
		rounds = max(rounds, len(x.Bytes)-1)
		for _, v := range x.Bytes {
			top = max(top, float64(v)/(1<<20))
		}
	}
	yStep := niceStep(top / 5)
	yMax := yStep * math.Max(1, math.Ceil(top/yStep))
	xStep := int(math.Max(1, niceStep(float64(rounds)/10)))
	px := func(round int) float64 {
		return plotLeft + float64(round)*(plotRight-plotLeft)/float64(rounds)
	}
	py := func(mib float64) float64 { return plotBottom - mib*(plotBottom-plotTop)/yMax }

	var b bytes.Buffer
	fmt.Fprintf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n")
	fmt.Fprintf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n",
		svgWidth, svgHeight, svgWidth, svgHeight)
	fmt.Fprintf(&b, "<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", svgWidth, svgHeight)
	fmt.Fprintf(&b, "<text x=\"%d\" y=\"24\" text-anchor=\"middle\" font-size=\"14\">%s</text>\n", svgWidth/2,
		svgText(fmt.Sprintf("rein's live store (bbolt file) over a steady workload of %d runs a round", s.RunsPerRound)))
	// Grid and y ticks.
	for v := 0.0; v <= yMax+yStep/2; v += yStep {
		y := py(v)
		fmt.Fprintf(&b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>\n", plotLeft, y, plotRight, y)
		fmt.Fprintf(&b, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", plotLeft-6, y+4, svgText(trimFloat(v)))
	}
	// x ticks.
	for r := 0; r <= rounds; r += xStep {
		x := px(r)
		fmt.Fprintf(&b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#000000\"/>\n", x, plotBottom, x, plotBottom+5)
		fmt.Fprintf(&b, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%d</text>\n", x, plotBottom+18, r)
	}
	// Axes and their titles.
	fmt.Fprintf(&b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#000000\"/>\n", plotLeft, plotTop, plotLeft, plotBottom)
	fmt.Fprintf(&b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#000000\"/>\n", plotLeft, plotBottom, plotRight, plotBottom)
	fmt.Fprintf(&b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", (plotLeft+plotRight)/2, plotBottom+40,
		svgText(fmt.Sprintf("round (%d runs started and finished each)", s.RunsPerRound)))
	fmt.Fprintf(&b, "<text x=\"18\" y=\"%d\" text-anchor=\"middle\" transform=\"rotate(-90 18 %d)\">MiB</text>\n",
		(plotTop+plotBottom)/2, (plotTop+plotBottom)/2)
	// The series and the legend.
	for i, x := range s.Series {
		colour := seriesColours[i%len(seriesColours)]
		pts := make([]string, len(x.Bytes))
		for r, v := range x.Bytes {
			pts[r] = fmt.Sprintf("%.1f,%.1f", px(r), py(float64(v)/(1<<20)))
		}
		fmt.Fprintf(&b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"%s\"/>\n", colour, strings.Join(pts, " "))
		ly := plotTop + 14 + 18*i
		fmt.Fprintf(&b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"/>\n", plotLeft+12, ly, plotLeft+36, ly, colour)
		fmt.Fprintf(&b, "<text x=\"%d\" y=\"%d\">%s</text>\n", plotLeft+42, ly+4, svgText(x.Name))
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// niceStep is the smallest of 1, 2, 2.5 or 5 times a power of ten that is
// at least v (1 for v ≤ 0).
func niceStep(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func trimFloat(v float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
}

// svgText escapes s for an SVG text node.
func svgText(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
