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

// Locks are the named locks that every Store on the prefix shares, such as
// the replicas' admission lock ("admission"). It owns the keys under
// P lock/<name>/: etcd's concurrency.Mutex puts one per waiter, attached to
// the lease of the Locks' session, and the oldest holds the lock. The
// Store embeds it and closes it with itself, which frees every lock still
// held.
type Locks struct {
	*conn

	// sessMu guards sess, the session the locks are held under: made at
	// the first Lock, and made again once its lease ended.
	sessMu sync.Mutex
	sess   *concurrency.Session
}

// Lock takes the lock name that every Store on the prefix shares (under
// P lock/NAME), waiting for it until ctx ends; unlock releases it. It is
// held under an etcd lease of its own (lockTTL), so the lock of a replica
// that died or was cut off frees itself.
func (l *Locks) Lock(ctx context.Context, name string) (unlock func(), err error) {
	if err := l.enter("lock " + name); err != nil {
		return nil, err
	}
	defer l.mu.RUnlock()
	sess, err := l.session(ctx)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	m := concurrency.NewMutex(sess, l.keys.p+"lock/"+name)
	if err := m.Lock(ctx); err != nil {
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	return func() { _ = m.Unlock(context.WithoutCancel(ctx)) }, nil
}

// session is the session the locks are held under, made anew when there
// is none or its lease ended.
func (l *Locks) session(ctx context.Context) (*concurrency.Session, error) {
	l.sessMu.Lock()
	defer l.sessMu.Unlock()
	if sess := l.sess; sess != nil {
		select {
		case <-sess.Done():
		default:
			return sess, nil
		}
	}
	sess, err := concurrency.NewSession(l.cli, concurrency.WithTTL(lockTTL), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, err
	}
	l.sess = sess
	return sess, nil
}

// close ends the locks' session, freeing any lock still held.
func (l *Locks) close() {
	l.sessMu.Lock()
	defer l.sessMu.Unlock()
	if l.sess != nil {
		_ = l.sess.Close()
		l.sess = nil
	}
}
