package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/reinhq/rein/internal/hostcheck"
	"github.com/reinhq/rein/internal/metrics"
	"github.com/reinhq/rein/internal/store"
)

// readyTimeout bounds /readyz's read of the store.
const readyTimeout = 2 * time.Second

// AdminHandler serves an operator's HTTP endpoints for the node:
//
//	/metrics       m's registry in the Prometheus text format
//	/healthz       200 while the process serves HTTP at all (liveness)
//	/readyz        200 when the node takes calls: it is not shutting down,
//	               holds its etcd lease (a replica), its store answers a
//	               read within 2s and takes writes (no NOSPACE alarm on
//	               its etcd) and has not stopped taking them after a
//	               failed sync or commit (a bolt store); else 503 and why
//	/debug/pprof/  Go's profiles, only with withPprof
//
// It is meant for an address only operators reach (rein serve
// --admin-listen): it has no authentication of its own. It answers only to
// the Host and Origin headers site allows, and refuses the rest with 403,
// so that a page on a name rebound to this machine reads none of it.
func (n *Node) AdminHandler(m *metrics.Metrics, withPprof bool, site hostcheck.Rule) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := n.ready(r.Context()); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	if withPprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return site.Guard(mux)
}

// ready says why the node does not take calls, or nil.
func (n *Node) ready(ctx context.Context) error {
	select {
	case <-n.done:
		return fmt.Errorf("the server is shutting down")
	default:
	}
	if f := failingOf(n.Store); f != nil {
		if err := f.Failure(); err != nil {
			return fmt.Errorf("the store stopped taking writes: %w", err)
		}
	}
	if n.leased != nil && !n.leased() {
		return fmt.Errorf("the server does not hold its etcd lease: it drives no runs until etcd grants it one")
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	// A store that hangs (a wedged disk) must not hang the probe.
	read := make(chan error, 1)
	go func() {
		if _, _, err := n.Store.Changes(ctx, 0, 0); err != nil {
			read <- fmt.Errorf("the store does not answer: %w", err)
			return
		}
		// It answers; whether it takes writes is asked apart, as a full
		// etcd still serves reads. A store that cannot tell (the alarm
		// list refused) is not held against the node.
		if a := spaceOf(n.Store); a != nil {
			if err := a.SpaceAlarm(ctx); errors.Is(err, store.ErrNoSpace) {
				read <- fmt.Errorf("the store takes no writes: %w", err)
				return
			}
		}
		read <- nil
	}()
	select {
	case err := <-read:
		return err
	case <-ctx.Done():
		return fmt.Errorf("the store did not answer within %s", readyTimeout)
	}
}

// spaceAlarmer is a store that says whether it is out of space: an error
// wrapping store.ErrNoSpace while it is (the etcd store's NOSPACE alarm).
type spaceAlarmer interface {
	SpaceAlarm(ctx context.Context) error
}

// spaceOf is s, or a store s wraps (Unwrap: the metrics' timing, the
// lifecycle's reads of archived runs), as a spaceAlarmer; nil when none is
// one.
func spaceOf(s store.Store) spaceAlarmer {
	for s != nil {
		switch w := s.(type) {
		case spaceAlarmer:
			return w
		case interface{ Unwrap() store.Store }:
			s = w.Unwrap()
		default:
			return nil
		}
	}
	return nil
}
