package replay

import (
	"google.golang.org/protobuf/types/known/durationpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// keepTiming gives a replayed event the recorded event's measured
// durations (how long a model call, a tool, a write's commit or the checks
// took): timing is data the recording holds, not something a replay
// reproduces, so it never makes a divergence. Only the durations are
// copied, and only between events of the same kind; every other field is
// still compared.
func keepTiming(ev, rec *reinv1.Event) {
	switch p := ev.GetPayload().(type) {
	case *reinv1.Event_ModelReturned:
		if r := rec.GetModelReturned(); r != nil {
			p.ModelReturned.Duration = cloneDuration(r.GetDuration())
		}
	case *reinv1.Event_ToolReturned:
		if r := rec.GetToolReturned(); r != nil {
			p.ToolReturned.Duration = cloneDuration(r.GetDuration())
		}
	case *reinv1.Event_WriteCommitted:
		if r := rec.GetWriteCommitted(); r != nil {
			p.WriteCommitted.Duration = cloneDuration(r.GetDuration())
		}
	case *reinv1.Event_ChecksCompleted:
		if r := rec.GetChecksCompleted(); r != nil {
			p.ChecksCompleted.Duration = cloneDuration(r.GetDuration())
		}
	}
}

func cloneDuration(d *durationpb.Duration) *durationpb.Duration {
	if d == nil {
		return nil
	}
	return &durationpb.Duration{Seconds: d.GetSeconds(), Nanos: d.GetNanos()}
}
