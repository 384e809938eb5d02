package engine

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
)

// commit folds nothing itself: the state it returns is the one the store
// folded and stored. What the store's fold rejects is errFold, wrapping the
// fold's own error, and nothing is stored; a refusal of another kind (a
// stale version) is not errFold.
func TestCommitTakesTheStoredState(t *testing.T) {
	e, s := setup(t, Config{Tools: searchTools(t)})
	ctx := testCtx(t)
	st, _ := runToRest(t, e, s, testContract(askReply("Which quarter?")))
	if st.Status != statusNeedsInput {
		t.Fatalf("run is %s, want needs_input", runstate.StatusName(st.Status))
	}
	budgetReached := func() []*reinv1.Event {
		return []*reinv1.Event{{Payload: &reinv1.Event_BudgetReached{BudgetReached: &reinv1.BudgetReached{Limit: "deadline"}}}}
	}

	// needs_input → expired is not in the table.
	_, err := e.commit(ctx, st, "harness", []*reinv1.Event{{Payload: &reinv1.Event_StatusChanged{StatusChanged: &reinv1.StatusChanged{
		From: statusNeedsInput, To: reinv1.RunStatus_RUN_STATUS_EXPIRED, Reason: "test",
	}}}})
	if !errors.Is(err, errFold) || !errors.Is(err, runstate.ErrIllegalTransition) {
		t.Errorf("commit of an illegal transition: %v, want errFold wrapping ErrIllegalTransition", err)
	}
	if after, _ := stored(t, s, st.RunID); after.Version != st.Version {
		t.Fatalf("a refused commit stored something: version %d→%d", st.Version, after.Version)
	}

	// The twin: events the fold takes are stored, and the state returned is
	// the store's, as Load reads it.
	next, err := e.commit(ctx, st, "harness", budgetReached())
	if err != nil {
		t.Fatalf("commit of budget_reached: %v", err)
	}
	loaded, _ := stored(t, s, st.RunID)
	if next.Version != st.Version+1 || !proto.Equal(next.Proto(true), loaded.Proto(true)) {
		t.Errorf("commit returned\n%v\nwant the stored\n%v", next.Proto(true), loaded.Proto(true))
	}

	// A stale version is the store's conflict, not the fold's.
	if _, err := e.commit(ctx, st, "harness", budgetReached()); !errors.Is(err, store.ErrConflict) || errors.Is(err, errFold) {
		t.Errorf("commit at a stale version: %v, want ErrConflict and not errFold", err)
	}
}
