package store

import (
	"context"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// Schedules is a store that keeps schedules (internal/schedule): by
// tenant and name, each stored whole. Errors: a name taken is ErrExists,
// a schedule not stored ErrNotFound, both wrapped with the name.
type Schedules interface {
	// CreateSchedule stores s, new.
	CreateSchedule(ctx context.Context, s *reinv1.Schedule) error
	// ListSchedules is tenant's schedules ("" for every tenant's), by
	// tenant then name.
	ListSchedules(ctx context.Context, tenant string) ([]*reinv1.Schedule, error)
	// UpdateSchedule gives the stored schedule to f and stores what f
	// leaves, atomically against every other update of it (on etcd, by
	// compare-and-swap across servers); an error of f stores nothing and
	// is returned.
	UpdateSchedule(ctx context.Context, tenant, name string, f func(*reinv1.Schedule) error) (*reinv1.Schedule, error)
	// DeleteSchedule removes the schedule.
	DeleteSchedule(ctx context.Context, tenant, name string) error
}

// ScheduleKey is the key of tenant's schedule name in a store: the tenant
// and the name, which a name's pattern keeps free of NUL.
func ScheduleKey(tenant, name string) string { return tenant + "\x00" + name }
