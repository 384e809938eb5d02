package tools

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"google.golang.org/protobuf/types/known/structpb"
)

// Multi is an Executor over several: a call goes to the first executor whose
// List has its tool.
type Multi struct {
	execs []Executor

	mu sync.Mutex
	// listed is each executor's last successful listing, by index.
	listed map[int][]string
}

var (
	_ Executor = (*Multi)(nil)
	_ Looker   = (*Multi)(nil)
)

// Join combines executors, skipping nil ones: nil when none is left, the
// executor itself when one is, else a Multi that dispatches by tool name to
// the first executor that lists the tool.
func Join(execs ...Executor) Executor {
	var kept []Executor
	for _, e := range execs {
		if e != nil {
			kept = append(kept, e)
		}
	}
	switch len(kept) {
	case 0:
		return nil
	case 1:
		return kept[0]
	}
	return &Multi{execs: kept, listed: map[int][]string{}}
}

// List implements Executor: every executor's tools, in order; a name listed
// twice is kept once, from the first executor, which is the one that runs it.
func (m *Multi) List(ctx context.Context) ([]Spec, error) {
	var out []Spec
	seen := map[string]bool{}
	for i, e := range m.execs {
		specs, err := e.List(ctx)
		if err != nil {
			return nil, err
		}
		m.remember(i, specs)
		for _, s := range specs {
			if !seen[s.Name] {
				seen[s.Name] = true
				out = append(out, s)
			}
		}
	}
	return out, nil
}

// route is the first executor whose List has tool. An executor whose List
// fails (a tool server that is down) is passed over, so it does not take the
// others' tools down with it, except for a write (strict) when its last
// listing had the tool or it never listed: then the write fails with its
// error rather than go to another executor that lists the same name.
func (m *Multi) route(ctx context.Context, tool string, strict bool) (Executor, error) {
	var names []string
	var listErrs []error
	for i, e := range m.execs {
		specs, err := e.List(ctx)
		if err != nil {
			m.mu.Lock()
			last, ok := m.listed[i]
			m.mu.Unlock()
			if strict && (!ok || slices.Contains(last, tool)) {
				return nil, fmt.Errorf("the executor that may run %q could not list its tools: %w", tool, err)
			}
			listErrs = append(listErrs, err)
			continue
		}
		m.remember(i, specs)
		for _, s := range specs {
			if s.Name == tool {
				return e, nil
			}
			names = append(names, s.Name)
		}
	}
	if len(listErrs) > 0 {
		return nil, fmt.Errorf("%w: %q (tools available: %v); listing tools failed: %w", ErrNoTool, tool, names, errors.Join(listErrs...))
	}
	return nil, fmt.Errorf("%w: %q (tools available: %v)", ErrNoTool, tool, names)
}

// Read implements Executor.
func (m *Multi) Read(ctx context.Context, call Call) (*structpb.Value, error) {
	e, err := m.route(ctx, call.Tool, false)
	if err != nil {
		return nil, err
	}
	return e.Read(ctx, call)
}

// Propose implements Executor.
func (m *Multi) Propose(ctx context.Context, call Call) (*structpb.Value, error) {
	e, err := m.route(ctx, call.Tool, true)
	if err != nil {
		return nil, err
	}
	return e.Propose(ctx, call)
}

// Commit implements Executor.
func (m *Multi) Commit(ctx context.Context, call Call, operationID string) (*structpb.Value, error) {
	e, err := m.route(ctx, call.Tool, true)
	if err != nil {
		return nil, err
	}
	return e.Commit(ctx, call, operationID)
}

// Lookup implements Looker: it asks the executor that runs the tool, and
// fails if that executor cannot look writes up.
func (m *Multi) Lookup(ctx context.Context, call Call, operationID string) (*structpb.Value, bool, error) {
	e, err := m.route(ctx, call.Tool, true)
	if err != nil {
		return nil, false, err
	}
	l, ok := e.(Looker)
	if !ok {
		return nil, false, fmt.Errorf("%w: the executor of %q has no lookup", ErrNoLookup, call.Tool)
	}
	return l.Lookup(ctx, call, operationID)
}

// remember keeps executor i's listing, for route when its List fails.
func (m *Multi) remember(i int, specs []Spec) {
	names := make([]string, len(specs))
	for j, s := range specs {
		names[j] = s.Name
	}
	m.mu.Lock()
	m.listed[i] = names
	m.mu.Unlock()
}

// Unlisted returns those of names that no executor of e lists (e may be a
// Multi, a single executor or nil), and, when some are, the errors of the
// executors whose listing failed: they may provide them. A nil error with
// names returned means no executor that answered has them, and none failed.
// The executors are asked in order until every name is found, so one that
// is down costs nothing when those before it list every name.
func Unlisted(ctx context.Context, e Executor, names []string) ([]string, error) {
	execs := []Executor{e}
	m, multi := e.(*Multi)
	switch {
	case multi:
		execs = m.execs
	case e == nil:
		execs = nil
	}
	listed := map[string]bool{}
	var errs []error
	missing := func() []string {
		var out []string
		for _, n := range names {
			if !listed[n] {
				out = append(out, n)
			}
		}
		return out
	}
	for i, x := range execs {
		if len(missing()) == 0 {
			return nil, nil
		}
		specs, err := x.List(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if multi {
			m.remember(i, specs)
		}
		for _, s := range specs {
			listed[s.Name] = true
		}
	}
	out := missing()
	if len(out) == 0 {
		return nil, nil
	}
	return out, errors.Join(errs...)
}
