package etcd

import (
	"context"
	"fmt"
	"sync"

	"go.etcd.io/etcd/client/v3/concurrency"
)

// lockTTL is the lease, in seconds, a lock is held under: a replica that
// dies holding one frees it within this.
const lockTTL = 10

// locks is the session this Store's locks are held under, made at the
// first Lock and made again once its lease ended.
type locks struct {
	mu   sync.Mutex
	sess *concurrency.Session
}

// Lock takes the lock name that every Store on the prefix shares (under
// P lock/NAME), waiting for it until ctx ends; unlock releases it. It is
// held under an etcd lease of its own (lockTTL), so the lock of a replica
// that died or was cut off frees itself.
func (s *Store) Lock(ctx context.Context, name string) (unlock func(), err error) {
	if err := s.enter("lock " + name); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	sess, err := s.lockSession(ctx)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	m := concurrency.NewMutex(sess, s.keys.p+"lock/"+name)
	if err := m.Lock(ctx); err != nil {
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	return func() { _ = m.Unlock(context.WithoutCancel(ctx)) }, nil
}

func (s *Store) lockSession(ctx context.Context) (*concurrency.Session, error) {
	s.locks.mu.Lock()
	defer s.locks.mu.Unlock()
	if sess := s.locks.sess; sess != nil {
		select {
		case <-sess.Done():
		default:
			return sess, nil
		}
	}
	sess, err := concurrency.NewSession(s.cli, concurrency.WithTTL(lockTTL), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, err
	}
	s.locks.sess = sess
	return sess, nil
}

// closeLocks ends the locks' session, freeing any lock still held.
func (s *Store) closeLocks() {
	s.locks.mu.Lock()
	defer s.locks.mu.Unlock()
	if s.locks.sess != nil {
		_ = s.locks.sess.Close()
		s.locks.sess = nil
	}
}
