package server

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/reinhq/rein/internal/store"
)

// unlistable is a store whose listing fails, as etcd's does while it is
// unavailable or bolt's on a damaged index.
type unlistable struct {
	store.Store
	closed bool
}

var errListing = errors.New("the index cannot be read")

func (u *unlistable) List(context.Context, store.Filter) (store.Page, error) {
	return store.Page{}, errListing
}

func (u *unlistable) Close() error {
	u.closed = true
	return u.Store.Close()
}

// TestOpenFailsCleanlyWhenResumeFails: a node whose runs cannot be listed
// at start returns the error (rein serve exits 5 with it) and closes its
// store, with every loop it would have run (admission, schedules, the
// lifecycle sweep) stopped before it started, instead of panicking.
func TestOpenFailsCleanlyWhenResumeFails(t *testing.T) {
	st := &unlistable{Store: tempBolt(t)}
	node, err := Open(context.Background(), Config{
		Store: st, Tools: fixtures(), Resume: true,
		Admission: &AdmissionConfig{Tenant: func(string) (int, float64) { return 0, 1 }, MaxRunning: 1},
	})
	if err == nil {
		node.Close()
		t.Fatal("Open succeeded on a store whose runs cannot be listed")
	}
	if !errors.Is(err, errListing) || !strings.Contains(err.Error(), "list the runs to resume") {
		t.Fatalf("Open's error = %v, want the listing's error with what it was doing", err)
	}
	if !st.closed {
		t.Error("Open failed but left the store open")
	}
}

// TestOpenResumesWhenListingWorks is the twin: the same node on a store
// that lists opens, and closes without error.
func TestOpenResumesWhenListingWorks(t *testing.T) {
	node, err := Open(context.Background(), Config{
		Store: tempBolt(t), Tools: fixtures(), Resume: true,
		Admission: &AdmissionConfig{Tenant: func(string) (int, float64) { return 0, 1 }, MaxRunning: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	node.Close()
}
