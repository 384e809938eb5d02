package server

import (
	"strings"
	"testing"
	"unicode/utf8"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/step"
)

// outputs drains what sub has of the model output after cursor.
func drainOutput(sub *Subscription, cursor uint64) (text string, done bool, n int) {
	for m := sub.Output(cursor); m != nil; m = sub.Output(cursor) {
		text += m.GetText()
		done = done || m.GetDone()
		n++
	}
	return text, done, n
}

// TestHubOutputFollowsACall: a watcher that sent the call's model_requested
// follows it from its start; each piece is sent once, in order, and the
// one after End says done. A watcher behind the call (its cursor before
// the model_requested) is sent nothing of it.
func TestHubOutputFollowsACall(t *testing.T) {
	h := NewHub()
	sub := h.SubscribeOutput("r")
	defer sub.Close()
	behind := h.SubscribeOutput("r")
	defer behind.Close()
	h.Begin("r", step.OutputCall{Requested: 5, Step: 2, Attempt: 1})
	select {
	case <-sub.O:
	default:
		t.Fatal("Begin did not wake the output watcher")
	}
	if m := sub.Output(5); m == nil || m.GetOffset() != 0 || m.GetText() != "" || m.GetRequested() != 5 || m.GetStep() != 2 {
		t.Fatalf("first message %v; want the call's start, empty, at offset 0", m)
	}
	h.Write("r", "Hello, ")
	h.Write("r", "world")
	if m := sub.Output(5); m.GetText() != "Hello, world" || m.GetOffset() != 0 || m.GetDone() {
		t.Fatalf("got %v; want the text so far from offset 0", m)
	}
	if m := sub.Output(5); m != nil {
		t.Fatalf("got %v with nothing new; want nil", m)
	}
	h.Write("r", "!")
	h.End("r")
	if m := sub.Output(5); m.GetText() != "!" || m.GetOffset() != 12 || !m.GetDone() {
		t.Fatalf("got %v; want the rest at offset 12, done", m)
	}
	if text, _, n := drainOutput(behind, 4); n != 0 || text != "" {
		t.Fatalf("a watcher before the call's model_requested was sent %d messages (%q)", n, text)
	}
	// Once it caught up, it is sent the whole call, which it followed from
	// its start though the call returned before it looked.
	if text, done, _ := drainOutput(behind, 5); text != "Hello, world!" || !done {
		t.Fatalf("the watcher that caught up was sent %q (done %v)", text, done)
	}
	if len(h.calls) != 0 {
		t.Fatalf("the hub keeps %d calls after the call returned and its watcher sent its end", len(h.calls))
	}
}

// TestHubOutputJoinerAndDoneCalls: a watcher that joins mid-call gets the
// text so far; one that looks after the call returned gets none of it; a
// returned call is kept only while a watcher is still to send its end.
func TestHubOutputJoinerAndDoneCalls(t *testing.T) {
	h := NewHub()
	h.Begin("r", step.OutputCall{Requested: 3, Step: 1, Attempt: 1})
	h.Write("r", "so far")
	joiner := h.SubscribeOutput("r")
	defer joiner.Close()
	if m := joiner.Output(3); m.GetText() != "so far" || m.GetOffset() != 0 {
		t.Fatalf("a joiner got %v; want the text so far at offset 0", m)
	}
	h.Write("r", " and more")
	h.End("r")
	if len(h.calls) != 1 {
		t.Fatal("a returned call was dropped before its follower sent its end")
	}
	late := h.SubscribeOutput("r")
	defer late.Close()
	if _, _, n := drainOutput(late, 3); n != 0 {
		t.Fatalf("a watcher that looked after the call returned was sent %d messages", n)
	}
	if text, done, _ := drainOutput(joiner, 3); text != " and more" || !done {
		t.Fatalf("the joiner's rest: %q done %v", text, done)
	}
	if len(h.calls) != 0 {
		t.Fatal("the returned call is kept after its follower sent its end")
	}
	// A call nobody follows is dropped when it returns.
	joiner.Close()
	late.Close()
	h.Begin("r", step.OutputCall{Requested: 9, Step: 2, Attempt: 1})
	h.Write("r", "x")
	h.End("r")
	if len(h.calls) != 0 {
		t.Fatal("a returned call nobody followed is kept")
	}
}

// TestHubOutputFollowerLeaves: a watcher that leaves mid-call no longer
// holds the call once it returns.
func TestHubOutputFollowerLeaves(t *testing.T) {
	h := NewHub()
	sub := h.SubscribeOutput("r")
	h.Begin("r", step.OutputCall{Requested: 1, Attempt: 1})
	h.Write("r", "a")
	if m := sub.Output(1); m.GetText() != "a" {
		t.Fatalf("got %v", m)
	}
	sub.Close()
	h.End("r")
	if len(h.calls) != 0 {
		t.Fatal("a call whose only follower left is kept after it returned")
	}
}

// TestHubOutputStartsOver: a retry (attempt 2) starts over at offset 0,
// after the first attempt's end was sent.
func TestHubOutputStartsOver(t *testing.T) {
	h := NewHub()
	sub := h.SubscribeOutput("r")
	defer sub.Close()
	h.Begin("r", step.OutputCall{Requested: 4, Attempt: 1})
	h.Write("r", "first try")
	sub.Output(4)
	h.End("r")
	h.Begin("r", step.OutputCall{Requested: 4, Attempt: 2})
	h.Write("r", "second")
	m1, m2 := sub.Output(4), sub.Output(4)
	if !m1.GetDone() || m1.GetAttempt() != 1 {
		t.Fatalf("first %v; want attempt 1's end", m1)
	}
	if m2.GetAttempt() != 2 || m2.GetOffset() != 0 || m2.GetText() != "second" {
		t.Fatalf("then %v; want attempt 2 from offset 0", m2)
	}
}

// TestHubOutputTruncates: a call's text past maxCallText is not kept; the
// watcher is told once.
func TestHubOutputTruncates(t *testing.T) {
	h := NewHub()
	sub := h.SubscribeOutput("r")
	defer sub.Close()
	h.Begin("r", step.OutputCall{Requested: 1, Attempt: 1})
	piece := strings.Repeat("x", 64<<10)
	for range maxCallText/len(piece) + 3 {
		h.Write("r", piece)
	}
	m := sub.Output(1)
	if len(m.GetText()) != maxCallText || !m.GetTruncated() {
		t.Fatalf("got %d bytes, truncated %v; want %d, truncated", len(m.GetText()), m.GetTruncated(), maxCallText)
	}
	h.Write("r", "more")
	if m := sub.Output(1); m != nil {
		t.Fatalf("after truncation, got %v; want nothing until the call ends", m)
	}
	h.End("r")
	if m := sub.Output(1); !m.GetDone() || m.GetText() != "" {
		t.Fatalf("got %v; want the end, with no text", m)
	}
}

// TestHubOutputBadUTF8: bytes that are not UTF-8 are replaced, so that
// the message carrying them can be sent.
func TestHubOutputBadUTF8(t *testing.T) {
	h := NewHub()
	sub := h.SubscribeOutput("r")
	defer sub.Close()
	h.Begin("r", step.OutputCall{Requested: 1, Attempt: 1})
	h.Write("r", "ok \xff")
	if m := sub.Output(1); m.GetText() != "ok \uFFFD" {
		t.Fatalf("got %q", m.GetText())
	}
	// Write to a run with no call in flight keeps nothing.
	h.Write("other", "x")
	if len(h.calls) != 1 {
		t.Fatal("a write with no call in flight made one")
	}
}

// TestHubRelayedCalls: a call another server drives comes in through the
// relay as its text so far: the hub sends each piece once, and nil ends
// it; a call in flight here wins over what the relay says of the run.
func TestHubRelayedCalls(t *testing.T) {
	h := NewHub()
	sub := h.SubscribeOutput("r")
	defer sub.Close()
	call := func(text string, done bool) *reinv1.ModelOutput {
		return &reinv1.ModelOutput{Requested: 3, Step: 1, Attempt: 1, Text: text, Done: done}
	}
	h.relayed("r", "b", call("Hel", false))
	h.relayed("r", "b", call("Hello", false))
	if text, done, _ := drainOutput(sub, 3); text != "Hello" || done {
		t.Fatalf("relayed so far: %q done %v", text, done)
	}
	h.relayed("r", "b", nil) // the call's key was deleted: its server's lease ended
	if _, done, _ := drainOutput(sub, 3); !done {
		t.Fatal("a relayed call whose key went was not ended")
	}
	h.relayed("r", "b", call("late", true))
	if _, _, n := drainOutput(sub, 3); n != 0 || len(h.calls) != 0 {
		t.Fatalf("a relayed call that had returned before it was followed was sent (%d messages)", n)
	}
	h.Begin("r", step.OutputCall{Requested: 7, Step: 2, Attempt: 1})
	h.Write("r", "mine")
	h.relayed("r", "b", &reinv1.ModelOutput{Requested: 7, Step: 2, Attempt: 1, Text: "theirs"})
	if text, _, _ := drainOutput(sub, 7); text != "mine" {
		t.Fatalf("with a call in flight here, the watcher was sent %q", text)
	}
}

// TestHubOutputNextCall: a watcher still to send the end of one call when
// the next begins follows that one next, from its start, though it
// returned before the watcher got to it; a call relayed from another
// server that never ended here is ended when a call begins here.
func TestHubOutputNextCall(t *testing.T) {
	h := NewHub()
	sub := h.SubscribeOutput("r")
	defer sub.Close()
	h.Begin("r", step.OutputCall{Requested: 3, Step: 1, Attempt: 1})
	h.Write("r", "first")
	h.End("r")
	h.Begin("r", step.OutputCall{Requested: 6, Step: 2, Attempt: 1})
	h.Write("r", "second")
	h.End("r")
	if text, done, _ := drainOutput(sub, 3); text != "first" || !done {
		t.Fatalf("the first call: %q done %v", text, done)
	}
	if text, done, _ := drainOutput(sub, 6); text != "second" || !done {
		t.Fatalf("the next call, begun and returned while the watcher was behind: %q done %v", text, done)
	}
	if len(h.calls) != 0 {
		t.Fatal("calls are kept after the watcher sent their ends")
	}

	h.relayed("r", "b", &reinv1.ModelOutput{Requested: 8, Step: 3, Attempt: 1, Text: "theirs"})
	drainOutput(sub, 8)
	h.Begin("r", step.OutputCall{Requested: 8, Step: 3, Attempt: 1, Resumed: true}) // this server took the run over
	h.Write("r", "mine")
	first := sub.Output(8)
	if !first.GetDone() || first.GetResumed() {
		t.Fatalf("got %v; want the relayed call ended", first)
	}
	if m := sub.Output(8); !m.GetResumed() || m.GetText() != "mine" || m.GetOffset() != 0 {
		t.Fatalf("then %v; want the call begun here, from its start", m)
	}
}

// TestHubRelayedWriters: after a takeover, the old server's key going
// (its lease ended) does not end the new server's call, and the old
// server's older call is not taken for a new one.
func TestHubRelayedWriters(t *testing.T) {
	h := NewHub()
	sub := h.SubscribeOutput("r")
	defer sub.Close()
	h.relayed("r", "old", &reinv1.ModelOutput{Requested: 3, Step: 1, Attempt: 1, Text: "cut"})
	h.relayed("r", "new", &reinv1.ModelOutput{Requested: 3, Step: 1, Attempt: 1, Resumed: true, Text: "again"})
	h.relayed("r", "old", nil)
	h.relayed("r", "old", &reinv1.ModelOutput{Requested: 2, Step: 1, Attempt: 1, Text: "stale"})
	var texts []string
	var ended []bool
	for m := sub.Output(3); m != nil; m = sub.Output(3) {
		if m.GetOffset() == 0 {
			texts, ended = append(texts, ""), append(ended, false)
		}
		texts[len(texts)-1] += m.GetText()
		ended[len(ended)-1] = m.GetDone()
	}
	if len(texts) != 2 || texts[0] != "cut" || !ended[0] || texts[1] != "again" || ended[1] {
		t.Fatalf("calls %q ended %v; want the old server's ended, the new server's going on", texts, ended)
	}
}

// TestHubSnapshotCutsCharactersWhole: the text put in the relay is cut
// at maxRelayText, at a character's start, and says it was cut; a call
// under it is put whole.
func TestHubSnapshotCutsCharactersWhole(t *testing.T) {
	h := NewHub()
	h.Begin("r", step.OutputCall{Requested: 1, Attempt: 1})
	h.Write("r", "日本")
	if o := h.snapshot("r"); o.GetText() != "日本" || o.GetTruncated() {
		t.Fatalf("a short call's snapshot: %q truncated %v", o.GetText(), o.GetTruncated())
	}
	h.Write("r", strings.Repeat("日", maxRelayText/3+10))
	o := h.snapshot("r")
	if !o.GetTruncated() || len(o.GetText()) > maxRelayText || len(o.GetText()) < maxRelayText-3 || !utf8.ValidString(o.GetText()) {
		t.Fatalf("a long call's snapshot: %d bytes, valid %v, truncated %v; want at most %d whole characters, truncated",
			len(o.GetText()), utf8.ValidString(o.GetText()), o.GetTruncated(), maxRelayText)
	}
}
