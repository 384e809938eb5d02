package step

import (
	"testing"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
)

// A person's message (a steer) is delivered after the history, so the
// call that reads it still begins with the whole previous input: the
// prefix is every byte the previous call was sent. Its twin: a compaction
// keeps only the contract of the prefix, since the summary after it is
// new.
func TestPrefixSurvivesASteerNotACompaction(t *testing.T) {
	var tr transcript
	tr.init(&reinv1.TaskContract{Goal: "find the invoice total", Tools: []*reinv1.ToolGrant{{Name: "search"}}})
	head := tr.size
	call := func(d string) {
		tr.add(model.Turn{Decision: &reinv1.Decision{Action: &reinv1.Decision_FinalAnswer{FinalAnswer: &reinv1.FinalAnswer{Text: d}}}}, 0)
		tr.add(model.Turn{Observation: &model.Observation{Source: "tool:search", Text: "result of " + d}}, 0)
	}
	tr.requested(time.Unix(0, 0), false)
	call("one")
	tr.requested(time.Unix(1, 0), false)
	sent := tr.size
	call("two")
	tr.held = append(tr.held, entry{turn: model.Turn{Observation: &model.Observation{Source: "person", Text: "check the second page too"}}})
	tr.deliver()
	if b, n := tr.prefix(false); b != uint64(sent) || n != uint64(sent)/4 {
		t.Fatalf("prefix after a steer = %d bytes (%d tokens), want the whole previous input, %d bytes", b, n, sent)
	}
	if bp := tr.breakpoints(); len(bp) != 2 || bp[0] != 1 || int(bp[1]) != len(tr.parts) {
		t.Fatalf("breakpoints %v, want after the contract and after the last of %d parts", bp, len(tr.parts))
	}

	tr.requested(time.Unix(2, 0), false)
	tr.limit = 1
	cc := tr.compaction(5)
	if cc == nil {
		t.Fatal("no compaction over the limit")
	}
	tr.compact(cc)
	if b, _ := tr.prefix(false); b != uint64(head) {
		t.Fatalf("prefix after a compaction = %d bytes, want the contract's %d", b, head)
	}
}
