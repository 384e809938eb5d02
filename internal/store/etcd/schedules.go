package etcd

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/store"
)

var _ store.Schedules = (*Store)(nil)

// Schedules are kept under P schedule/TENANT/NAME (the tenant path-escaped),
// each a marshalled reinv1.Schedule; an update is a compare-and-swap on the
// key's revision, so replicas never overwrite one another's.

func (s *Store) schedules(tenant string) string {
	p := s.keys.p + "schedule/"
	if tenant != "" {
		p += url.PathEscape(tenant) + "/"
	}
	return p
}

func (s *Store) scheduleKey(tenant, name string) string { return s.schedules(tenant) + name }

// CreateSchedule implements store.Schedules.
func (s *Store) CreateSchedule(ctx context.Context, sc *reinv1.Schedule) error {
	if err := s.enter("create schedule " + sc.GetName()); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	v, err := proto.Marshal(sc)
	if err != nil {
		return err
	}
	key := s.scheduleKey(sc.GetTenant(), sc.GetName())
	resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(clientv3.OpPut(key, string(v))).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return fmt.Errorf("schedule %q: %w", sc.GetName(), store.ErrExists)
	}
	return nil
}

// ListSchedules implements store.Schedules.
func (s *Store) ListSchedules(ctx context.Context, tenant string) ([]*reinv1.Schedule, error) {
	if err := s.enter("list schedules"); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	resp, err := s.cli.Get(ctx, s.schedules(tenant), clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	var out []*reinv1.Schedule
	for _, kv := range resp.Kvs {
		sc := &reinv1.Schedule{}
		if err := proto.Unmarshal(kv.Value, sc); err != nil {
			return nil, fmt.Errorf("schedule %s: %w: %v", strings.TrimPrefix(string(kv.Key), s.keys.p), store.ErrDataLoss, err)
		}
		out = append(out, sc)
	}
	return out, nil
}

// UpdateSchedule implements store.Schedules.
func (s *Store) UpdateSchedule(ctx context.Context, tenant, name string, f func(*reinv1.Schedule) error) (*reinv1.Schedule, error) {
	if err := s.enter("update schedule " + name); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	key := s.scheduleKey(tenant, name)
	for range maxRateTries {
		resp, err := s.cli.Get(ctx, key)
		if err != nil {
			return nil, err
		}
		if len(resp.Kvs) == 0 {
			return nil, fmt.Errorf("schedule %q: %w", name, store.ErrNotFound)
		}
		sc := &reinv1.Schedule{}
		if err := proto.Unmarshal(resp.Kvs[0].Value, sc); err != nil {
			return nil, fmt.Errorf("schedule %q: %w: %v", name, store.ErrDataLoss, err)
		}
		if err := f(sc); err != nil {
			return nil, err
		}
		v, err := proto.Marshal(sc)
		if err != nil {
			return nil, err
		}
		txn, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)).Then(clientv3.OpPut(key, string(v))).Commit()
		if err != nil {
			return nil, err
		}
		if txn.Succeeded {
			return sc, nil
		}
	}
	return nil, fmt.Errorf("schedule %q: %w: other servers' updates won %d times in a row; try again", name, store.ErrConflict, maxRateTries)
}

// DeleteSchedule implements store.Schedules.
func (s *Store) DeleteSchedule(ctx context.Context, tenant, name string) error {
	if err := s.enter("delete schedule " + name); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	resp, err := s.cli.Delete(ctx, s.scheduleKey(tenant, name))
	if err != nil {
		return err
	}
	if resp.Deleted == 0 {
		return fmt.Errorf("schedule %q: %w", name, store.ErrNotFound)
	}
	return nil
}
