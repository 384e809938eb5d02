package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

// testChanges: every status change (a run's creation included) is recorded
// once, in commit order, with a gap-free cursor; a refused append records
// none; paging by cursor and reopening keep them.
func testChanges(t *testing.T, h *harness) {
	ctx := context.Background()
	running := reinv1.RunStatus_RUN_STATUS_RUNNING
	a, b := newSpec(1), newSpec(2)
	b.tenant = "globex"
	mustCreate(t, h.s, runStarted(a))
	mustAppend(t, h.s, a.id, 1, steps(a.id, 2, 2)...)
	mustAppend(t, h.s, a.id, 3, inputRequested(a.id, 4), statusChanged(a.id, 5, running, reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT))
	mustCreate(t, h.s, runStarted(b))
	mustAppend(t, h.s, b.id, 1, statusChanged(b.id, 2, running, reinv1.RunStatus_RUN_STATUS_COMPLETED))
	// Refused: stale version, and an illegal transition. Neither is a change.
	if _, err := h.s.Append(ctx, b.id, 1, []*reinv1.Event{statusChanged(b.id, 2, running, reinv1.RunStatus_RUN_STATUS_FAILED)}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale append: %v, want ErrConflict", err)
	}
	if _, err := h.s.Append(ctx, a.id, 5, []*reinv1.Event{statusChanged(a.id, 6, reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT, reinv1.RunStatus_RUN_STATUS_COMPLETED)}); err == nil {
		t.Fatal("an illegal transition was stored")
	}

	want := []string{
		fmt.Sprintf("1 %s acme unspecified→running v1", a.id),
		fmt.Sprintf("2 %s acme running→needs_input v5", a.id),
		fmt.Sprintf("3 %s globex unspecified→running v1", b.id),
		fmt.Sprintf("4 %s globex running→completed v2", b.id),
	}
	check := func(when string) {
		t.Helper()
		got, head, err := h.s.Changes(ctx, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		if head != 4 || len(got) != len(want) {
			t.Fatalf("%s: %d changes, head %d; want %d and 4", when, len(got), head, len(want))
		}
		for i, c := range got {
			ch := c.Change
			line := fmt.Sprintf("%d %s %s %s→%s v%d", c.Cursor, ch.GetRunId(), c.Tenant,
				statusWord(ch.GetPrevious()), statusWord(ch.GetStatus()), ch.GetVersion())
			if line != want[i] || ch.GetCursor() != c.Cursor || ch.GetChangedAt() == nil {
				t.Errorf("%s: change %d = %q (cursor %d, at %v), want %q", when, i, line, ch.GetCursor(), ch.GetChangedAt(), want[i])
			}
		}
		page, head, err := h.s.Changes(ctx, 2, 1)
		if err != nil || len(page) != 1 || page[0].Cursor != 3 || head != 4 {
			t.Errorf("%s: Changes(after 2, limit 1) = %v, head %d, %v; want cursor 3", when, page, head, err)
		}
		if rest, _, err := h.s.Changes(ctx, 4, 10); err != nil || len(rest) != 0 {
			t.Errorf("%s: Changes after the head = %v, %v; want none", when, rest, err)
		}
	}
	check("before reopen")
	h.reopen()
	check("after reopen")
}

func statusWord(s reinv1.RunStatus) string {
	if s == reinv1.RunStatus_RUN_STATUS_UNSPECIFIED {
		return "unspecified"
	}
	return map[reinv1.RunStatus]string{
		reinv1.RunStatus_RUN_STATUS_RUNNING:     "running",
		reinv1.RunStatus_RUN_STATUS_NEEDS_INPUT: "needs_input",
		reinv1.RunStatus_RUN_STATUS_COMPLETED:   "completed",
	}[s]
}
