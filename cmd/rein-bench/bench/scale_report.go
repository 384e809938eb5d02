package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteText writes the scale result for a person: the headline, a table
// of every replica at each replica count, the observer's ratios, CPU per
// driven step across the counts, and the look-over phase.
func (r ScaleResult) WriteText(w io.Writer) error {
	verdict := func(ratio float64) string {
		if ratio <= scaleTarget {
			return "met"
		}
		return "MISSED"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "scale  the observer's CPU, worst ratio to its idle CPU %.2f (target ≤ %.2f, %s); %.0f paused runs throughout, %d clients for each driving replica, %d-step runs, lease TTL %.0fs; %.1fs\n",
		r.Figure, r.Baseline, verdict(r.Figure), r.Extra["paused_runs"], scaleClients, scaleStepsPerRun, ScaleTTL.Seconds(), r.Seconds)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "N\treplica\trole\tidle CPU ms/s\tidle etcd KB/s\tsteps driven\tbusy CPU ms\tbusy etcd KB\tCPU ms/step\t")
	for _, g := range r.Groups {
		for _, x := range g.PerReplica {
			role := "drives"
			if x.Observer {
				role = "observer"
			}
			perStep := "-"
			if x.Steps > 0 {
				perStep = fmt.Sprintf("%.2f", x.CPUMsPerStep)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%.1f\t%.2f\t%.0f\t%.0f\t%.1f\t%s\t\n",
				g.Replicas, x.Name, role, x.IdleCPUMsPerS, x.IdleEtcdKBPerS, x.Steps, x.BusyCPUMs, x.BusyEtcdKB, perStep)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, g := range r.Groups {
		fmt.Fprintf(&b, "  N=%d: %.0f steps in %.1fs (%.0f steps/s), %.2f ms CPU per step driven, etcd's file grew %.0f bytes a step", g.Replicas, g.Steps, g.BusySeconds, g.Steps/g.BusySeconds, g.CPUMsPerStep, g.EtcdDBBytesPerStep)
		if g.NoEtcdBytes {
			b.WriteString(" (this rein has no rein_etcd_received_bytes_total: its etcd bytes are not measured)")
		}
		if o := g.Observer; o != nil {
			etcd := fmt.Sprintf("etcd %.2f KB vs %.2f KB (ratio %.2f, %s)", o.BusyEtcdKB, o.IdleEtcdKB, o.EtcdRatio, verdict(o.EtcdRatio))
			if g.NoEtcdBytes {
				etcd = "etcd not measured"
			}
			fmt.Fprintf(&b, "; the observer per 1,000 steps driven elsewhere: CPU %.0f ms busy vs %.0f ms idle (ratio %.2f, %s), %s",
				o.BusyCPUMs, o.IdleCPUMs, o.CPURatio, verdict(o.CPURatio), etcd)
		}
		b.WriteString("\n")
	}
	var steps []string
	for _, g := range r.Groups {
		steps = append(steps, fmt.Sprintf("%d: %.2f", g.Replicas, g.CPUMsPerStep))
	}
	fmt.Fprintf(&b, "  CPU ms per driven step by replica count: %s (largest/smallest %.2f; flat is 1)\n", strings.Join(steps, ", "), r.Extra["cpu_ms_per_step_spread"])
	var alone []string
	for _, g := range r.Groups {
		alone = append(alone, fmt.Sprintf("%d: %.2f", g.Replicas, g.AloneCPUMsPerStep))
	}
	fmt.Fprintf(&b, "  the same work driven by one replica alone, the others idle, CPU ms per step: %s (largest/smallest %.2f; flat is 1)\n", strings.Join(alone, ", "), r.Extra["alone_cpu_ms_per_step_spread"])
	if lo := r.LookOver; lo != nil {
		added := fmt.Sprintf("%d finished runs added", lo.Finished)
		if lo.Finished < lo.Wanted {
			added = fmt.Sprintf("%d finished runs of %d added (the fill stopped at its budget, %v)", lo.Finished, lo.Wanted, scaleFillBudget)
		}
		etcd := fmt.Sprintf("etcd %.2f → %.2f KB/s (ratio %.2f, %s)", lo.BeforeEtcdKBPerS, lo.AfterEtcdKBPerS, lo.EtcdRatio, verdict(lo.EtcdRatio))
		if len(r.Groups) > 0 && r.Groups[0].NoEtcdBytes {
			etcd = "etcd not measured"
		}
		fmt.Fprintf(&b, "  look-over (N=%d): %s in %.1fs (etcd's file grew %.0f bytes a run; the observer meanwhile: %.0f ms CPU, %.0f KB from etcd); its idle CPU %.1f → %.1f ms/s (ratio %.2f, %s), %s\n",
			lo.Replicas, added, lo.FillSeconds, lo.EtcdDBBytesPerRun, lo.FillCPUMs, lo.FillEtcdKB, lo.BeforeCPUMsPerS, lo.AfterCPUMsPerS, lo.CPURatio, verdict(lo.CPURatio), etcd)
	}
	b.WriteString("  (one machine: every replica, etcd and the driver share its cores)\n")
	_, err := io.WriteString(w, b.String())
	return err
}
