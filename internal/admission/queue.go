package admission

import (
	"cmp"
	"slices"
	"time"

	"github.com/reinhq/rein/internal/runstate"
)

// waiting is a queued root run, as much of it as its place needs.
type waiting struct {
	id, tenant string
	priority   int32
	created    time.Time
	// deadline is zero when the run's timeout counts from its start.
	deadline time.Time
}

func waitingOf(st runstate.State) waiting {
	return waiting{id: st.RunID, tenant: st.Tenant, priority: st.Contract.GetPriority(), created: st.CreatedAt, deadline: st.Deadline}
}

// before is the order of queued runs in their tenant's queue: higher
// priority first, then earlier submitted.
func before(a, b waiting) int {
	if c := cmp.Compare(b.priority, a.priority); c != 0 {
		return c
	}
	if c := a.created.Compare(b.created); c != 0 {
		return c
	}
	return cmp.Compare(a.id, b.id)
}

// tenantShare is one tenant's running root runs and queue, in order.
type tenantShare struct {
	name    string
	max     int
	weight  float64
	running int
	queued  []waiting
}

// shares are the tenants' queues and running runs, kept between passes in
// step with the store's status changes (Controller.catchUp): each queued
// root run once, in its tenant's queue in order, and each running root run
// once.
type shares struct {
	by     map[string]*tenantShare
	limits func(string) (int, float64)
	// queued and running map each run they hold to its tenant.
	queued  map[string]waiting
	running map[string]string
	total   int
	// soonest is no later than the earliest deadline of a queued run
	// (zero: none has one).
	soonest time.Time
}

func newShares(limits func(string) (int, float64), running []runstate.State) *shares {
	s := &shares{by: map[string]*tenantShare{}, limits: limits, queued: map[string]waiting{}, running: map[string]string{}}
	for _, st := range running {
		s.run(st.RunID, st.Tenant)
	}
	return s
}

// of is tenant's share, made when it has none.
func (s *shares) of(tenant string) *tenantShare {
	t := s.by[tenant]
	if t == nil {
		t = &tenantShare{name: tenant}
		t.max, t.weight = s.limit(tenant)
		s.by[tenant] = t
	}
	return t
}

func (s *shares) limit(tenant string) (int, float64) {
	max, w := s.limits(tenant)
	if !(w > 0) {
		w = 1
	}
	return max, w
}

// reload reads every tenant's limit and weight again: once a pass, so that
// a reload takes effect.
func (s *shares) reload() {
	for name, t := range s.by {
		t.max, t.weight = s.limit(name)
	}
}

// queue puts a queued run in its place.
func (s *shares) queue(w waiting) {
	s.leave(w.id)
	t := s.of(w.tenant)
	i, _ := slices.BinarySearchFunc(t.queued, w, before)
	t.queued = slices.Insert(t.queued, i, w)
	s.queued[w.id] = w
	s.expireAt(w.deadline)
}

// expireAt has expired look over the queued runs once at passes the
// deadline (zero: none).
func (s *shares) expireAt(deadline time.Time) {
	if !deadline.IsZero() && (s.soonest.IsZero() || deadline.Before(s.soonest)) {
		s.soonest = deadline
	}
}

// queueAll puts queued runs, none of them held yet, in their places:
// sorted once, not inserted one by one.
func (s *shares) queueAll(queued []runstate.State) {
	for _, st := range queued {
		w := waitingOf(st)
		t := s.of(w.tenant)
		t.queued = append(t.queued, w)
		s.queued[w.id] = w
		s.expireAt(w.deadline)
	}
	for _, t := range s.by {
		slices.SortFunc(t.queued, before)
	}
}

// run counts a running root run.
func (s *shares) run(id, tenant string) {
	s.leave(id)
	s.of(tenant).running++
	s.running[id] = tenant
	s.total++
}

// leave forgets a run, queued or running; a tenant left with neither is
// dropped.
func (s *shares) leave(id string) {
	if w, ok := s.queued[id]; ok {
		delete(s.queued, id)
		t := s.by[w.tenant]
		if i, found := slices.BinarySearchFunc(t.queued, w, before); found {
			if i == 0 { // the head, the one a pass starts: nothing moves
				t.queued[0] = waiting{}
				t.queued = t.queued[1:]
			} else {
				t.queued = slices.Delete(t.queued, i, i+1)
			}
		}
		s.drop(t)
	}
	if tenant, ok := s.running[id]; ok {
		delete(s.running, id)
		t := s.by[tenant]
		t.running--
		s.total--
		s.drop(t)
	}
}

func (s *shares) drop(t *tenantShare) {
	if t.running == 0 && len(t.queued) == 0 {
		delete(s.by, t.name)
	}
}

// next is the tenant whose queued run starts next: of the tenants with a
// queued run and a free slot of their own, the one with the fewest running
// runs for its weight (running/weight), so that each gets slots in
// proportion to its weight; of equals, the one whose next run was
// submitted first. Nil when none may start one.
func (s *shares) next() *tenantShare {
	var best *tenantShare
	for _, t := range s.by {
		if len(t.queued) == 0 || t.max > 0 && t.running >= t.max {
			continue
		}
		if best == nil || fairer(t, best) {
			best = t
		}
	}
	return best
}

// fairer reports whether t should get the next slot before u.
func fairer(t, u *tenantShare) bool {
	a, b := float64(t.running)/t.weight, float64(u.running)/u.weight
	if a != b {
		return a < b
	}
	return before(t.queued[0], u.queued[0]) < 0
}

// expired are the queued runs whose deadline is not after now, in their
// order. It reads every queued run only when the earliest deadline known
// passed.
func (s *shares) expired(now time.Time) []waiting {
	if s.soonest.IsZero() || now.Before(s.soonest) {
		return nil
	}
	var out []waiting
	s.soonest = time.Time{}
	for _, w := range s.queued {
		switch {
		case w.deadline.IsZero():
		case !now.Before(w.deadline):
			out = append(out, w)
		case s.soonest.IsZero() || w.deadline.Before(s.soonest):
			s.soonest = w.deadline
		}
	}
	slices.SortFunc(out, before)
	return out
}
