package mem

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

var _ store.Schedules = (*Store)(nil)

// CreateSchedule implements store.Schedules.
func (s *Store) CreateSchedule(_ context.Context, sc *reinv1.Schedule) error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if s.closed {
		return store.ErrClosed
	}
	key := store.ScheduleKey(sc.GetTenant(), sc.GetName())
	if s.d.schedules[key] != nil {
		return fmt.Errorf("schedule %q: %w", sc.GetName(), store.ErrExists)
	}
	if s.d.schedules == nil {
		s.d.schedules = map[string]*reinv1.Schedule{}
	}
	s.d.schedules[key] = proto.CloneOf(sc)
	return nil
}

// ListSchedules implements store.Schedules.
func (s *Store) ListSchedules(_ context.Context, tenant string) ([]*reinv1.Schedule, error) {
	s.d.mu.RLock()
	defer s.d.mu.RUnlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	var keys []string
	for k := range s.d.schedules {
		if tenant == "" || strings.HasPrefix(k, tenant+"\x00") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	out := make([]*reinv1.Schedule, 0, len(keys))
	for _, k := range keys {
		out = append(out, proto.CloneOf(s.d.schedules[k]))
	}
	return out, nil
}

// UpdateSchedule implements store.Schedules.
func (s *Store) UpdateSchedule(_ context.Context, tenant, name string, f func(*reinv1.Schedule) error) (*reinv1.Schedule, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	key := store.ScheduleKey(tenant, name)
	cur := s.d.schedules[key]
	if cur == nil {
		return nil, fmt.Errorf("schedule %q: %w", name, store.ErrNotFound)
	}
	next := proto.CloneOf(cur)
	if err := f(next); err != nil {
		return nil, err
	}
	s.d.schedules[key] = next
	return proto.CloneOf(next), nil
}

// DeleteSchedule implements store.Schedules.
func (s *Store) DeleteSchedule(_ context.Context, tenant, name string) error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	key := store.ScheduleKey(tenant, name)
	if s.d.schedules[key] == nil {
		return fmt.Errorf("schedule %q: %w", name, store.ErrNotFound)
	}
	delete(s.d.schedules, key)
	return nil
}
