package server

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/reinhq/rein/internal/store"
)

// haltingStore is a real bolt store that can be told it failed, as the bolt
// store tells after a failed sync or commit (its Failed and Failure).
type haltingStore struct {
	store.Store
	once   sync.Once
	failed chan struct{}
	err    error
}

func (s *haltingStore) Failed() <-chan struct{} { return s.failed }

func (s *haltingStore) Failure() error {
	select {
	case <-s.failed:
		return s.err
	default:
		return nil
	}
}

func (s *haltingStore) halt(err error) {
	s.once.Do(func() { s.err = err; close(s.failed) })
}

// TestStoreFailureIsNotReady: a node whose store stopped taking writes is
// not ready (503, saying why) and says so to rein serve (StoreFailed,
// StoreErr). Its twin: before the failure it is ready and says nothing.
func TestStoreFailureIsNotReady(t *testing.T) {
	st := &haltingStore{Store: tempBolt(t), failed: make(chan struct{})}
	node, _, hs := adminServer(t, st, false)
	if code, body := get(t, hs.URL+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz before the failure: %d %q", code, body)
	}
	select {
	case <-node.StoreFailed():
		t.Fatal("StoreFailed is closed before the store failed")
	default:
	}
	cause := fmt.Errorf("%w: sync the log: input/output error", store.ErrUnavailable)
	st.halt(cause)
	code, body := get(t, hs.URL+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "input/output error") {
		t.Errorf("/readyz after the store failed: %d %q, want 503 naming the cause", code, body)
	}
	select {
	case <-node.StoreFailed():
	default:
		t.Fatal("StoreFailed is not closed after the store failed")
	}
	node.Close()
	if err := node.StoreErr(); !errors.Is(err, cause) {
		t.Errorf("StoreErr: %v, want the failure", err)
	}
}
