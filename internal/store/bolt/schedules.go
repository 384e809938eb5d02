package bolt

import (
	"context"
	"fmt"
	"strings"

	bbolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/store/seal"
)

// bucketSchedules holds the schedules: store.ScheduleKey(tenant, name) ->
// the Schedule, sealed. It is made by the first schedule stored.
var bucketSchedules = []byte("schedules")

var _ store.Schedules = (*Store)(nil)

// CreateSchedule implements store.Schedules.
func (s *Store) CreateSchedule(ctx context.Context, sc *reinv1.Schedule) error {
	key := []byte(store.ScheduleKey(sc.GetTenant(), sc.GetName()))
	_, err := s.submit(ctx, &writeReq{op: func(tx *bbolt.Tx) writeRes {
		b, err := tx.CreateBucketIfNotExists(bucketSchedules)
		if err != nil {
			return writeRes{err: errTx{err}}
		}
		if b.Get(key) != nil {
			return writeRes{err: fmt.Errorf("schedule %q: %w", sc.GetName(), store.ErrExists)}
		}
		v, err := seal.Seal(sc)
		if err != nil {
			return writeRes{err: err}
		}
		if err := b.Put(key, v); err != nil {
			return writeRes{err: errTx{err}}
		}
		return writeRes{}
	}})
	return err
}

// ListSchedules implements store.Schedules.
func (s *Store) ListSchedules(ctx context.Context, tenant string) ([]*reinv1.Schedule, error) {
	var out []*reinv1.Schedule
	err := s.view(ctx, "the schedules", func(tx *rtx) error {
		b := tx.Bucket(bucketSchedules)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			if tenant != "" && !strings.HasPrefix(string(k), tenant+"\x00") {
				return nil
			}
			sc := &reinv1.Schedule{}
			if err := unseal(v, sc, "schedule "+string(k)); err != nil {
				return err
			}
			out = append(out, sc)
			return nil
		})
	})
	return out, err
}

// UpdateSchedule implements store.Schedules.
func (s *Store) UpdateSchedule(ctx context.Context, tenant, name string, f func(*reinv1.Schedule) error) (*reinv1.Schedule, error) {
	key := []byte(store.ScheduleKey(tenant, name))
	var out *reinv1.Schedule
	_, err := s.submit(ctx, &writeReq{op: func(tx *bbolt.Tx) writeRes {
		b := tx.Bucket(bucketSchedules)
		var v []byte
		if b != nil {
			v = b.Get(key)
		}
		if v == nil {
			return writeRes{err: fmt.Errorf("schedule %q: %w", name, store.ErrNotFound)}
		}
		sc := &reinv1.Schedule{}
		if err := unseal(v, sc, "schedule "+name); err != nil {
			return writeRes{err: err}
		}
		if err := f(sc); err != nil {
			return writeRes{err: err}
		}
		nv, err := seal.Seal(sc)
		if err != nil {
			return writeRes{err: err}
		}
		if err := b.Put(key, nv); err != nil {
			return writeRes{err: errTx{err}}
		}
		out = proto.CloneOf(sc)
		return writeRes{}
	}})
	return out, err
}

// DeleteSchedule implements store.Schedules.
func (s *Store) DeleteSchedule(ctx context.Context, tenant, name string) error {
	key := []byte(store.ScheduleKey(tenant, name))
	_, err := s.submit(ctx, &writeReq{op: func(tx *bbolt.Tx) writeRes {
		b := tx.Bucket(bucketSchedules)
		if b == nil || b.Get(key) == nil {
			return writeRes{err: fmt.Errorf("schedule %q: %w", name, store.ErrNotFound)}
		}
		if err := b.Delete(key); err != nil {
			return writeRes{err: errTx{err}}
		}
		return writeRes{}
	}})
	return err
}
