package replica_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/reinhq/rein/internal/replica"
	etcdstore "github.com/reinhq/rein/internal/store/etcd"
)

// joinNamed joins a replica named name on prefix, without a server: the
// name is claimed at Join, before any engine is attached. A replica that
// joined leaves at the test's end.
func joinNamed(t *testing.T, prefix, name string, log *slog.Logger) (*replica.Replica, *etcdstore.Store, error) {
	t.Helper()
	st, err := etcdstore.Open(t.Context(), shared, prefix, etcdstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := replica.Join(t.Context(), replica.Config{Client: shared, Store: st, Name: name, TTL: ttl, Logger: log})
	if err != nil {
		_ = st.Close()
		return nil, nil, err
	}
	t.Cleanup(func() {
		rep.Leave(context.Background())
		_ = st.Close()
	})
	return rep, st, nil
}

// nameKey is the key that holds name on prefix: its value and the lease
// it is attached to (0 and "" when absent).
func nameKey(t *testing.T, prefix, name string) (string, clientv3.LeaseID) {
	t.Helper()
	resp, err := shared.Get(t.Context(), prefix+"replica/"+url.PathEscape(name))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return "", 0
	}
	return string(resp.Kvs[0].Value), clientv3.LeaseID(resp.Kvs[0].Lease)
}

// leases is the number of leases etcd holds.
func leases(t *testing.T) int {
	t.Helper()
	resp, err := shared.Leases(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return len(resp.Leases)
}

// TestJoinRefusesATakenName: while a replica named "dup" holds its lease,
// a second Join as "dup" on the same prefix is refused with ErrNameTaken
// (once it saw the holder's lease renewed), naming the name, the holder's
// lease and what to do, and leaves nothing behind (no lease, the name
// still the first's). The twins: another name on that prefix, and the
// same name on another prefix, join at once.
func TestJoinRefusesATakenName(t *testing.T) {
	prefix := "/names-" + t.Name() + "/"
	first, st, err := joinNamed(t, prefix, "dup", nil)
	if err != nil {
		t.Fatal(err)
	}
	held := st.Lease()
	for _, tc := range []struct {
		name, prefix, replica string
		refused               bool
	}{
		{"the same name on the same prefix", prefix, "dup", true},
		{"another name on the same prefix", prefix, "other", false},
		{"the same name on another prefix", "/names-elsewhere-" + t.Name() + "/", "dup", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := leases(t)
			rep, st, err := joinNamed(t, tc.prefix, tc.replica, nil)
			if !tc.refused {
				if err != nil {
					t.Fatalf("join as %q on %s: %v", tc.replica, tc.prefix, err)
				}
				if _, lease := nameKey(t, tc.prefix, tc.replica); !rep.Holding() || lease != st.Lease() {
					t.Fatalf("joined as %q: holding %v, name under lease %x, the replica's lease %x", tc.replica, rep.Holding(), int64(lease), int64(st.Lease()))
				}
				return
			}
			if !errors.Is(err, replica.ErrNameTaken) {
				t.Fatalf("join as %q beside a live %q: err %v, want ErrNameTaken", tc.replica, tc.replica, err)
			}
			t.Logf("refused: %v", err)
			for _, says := range []string{`"dup"`, fmt.Sprintf("%x", int64(held)), "another name", "stop the other server", "pid", "renewed"} {
				if !strings.Contains(err.Error(), says) {
					t.Errorf("the refusal does not say %q: %v", says, err)
				}
			}
			if after := leases(t); after != before {
				t.Errorf("the refused join left a lease: %d leases before, %d after", before, after)
			}
			if _, lease := nameKey(t, prefix, "dup"); lease != held || !first.Holding() {
				t.Errorf("after the refused join the name is under lease %x, want the first replica's %x (holding %v)", int64(lease), int64(held), first.Holding())
			}
		})
	}
}

// TestNameFreeAgain: a name is free again once its replica's lease ends:
// at once when the replica leaves; when it died (its lease no longer kept
// alive), a Join as its name waits for that lease to end, then joins, as a
// server restarted after a crash does. TestJoinRefusesATakenName is the
// twin: while the holder's lease is kept alive, a Join is refused.
func TestNameFreeAgain(t *testing.T) {
	prefix := "/names-" + t.Name() + "/"
	t.Run("after Leave", func(t *testing.T) {
		st, err := etcdstore.Open(t.Context(), shared, prefix, etcdstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		first, err := replica.Join(t.Context(), replica.Config{Client: shared, Store: st, Name: "left", TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		first.Leave(t.Context())
		left := time.Now()
		if _, _, err := joinNamed(t, prefix, "left", nil); err != nil {
			t.Fatalf("join after the name's replica left: %v", err)
		}
		if took := time.Since(left); took > ttl/2 {
			t.Errorf("join after the name's replica left took %v: it waited for a lease that had ended", took)
		}
	})
	t.Run("after its server died", func(t *testing.T) {
		// A replica that died: its name claimed under a lease no one keeps
		// alive.
		st, err := etcdstore.Open(t.Context(), shared, prefix, etcdstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		g, err := shared.Grant(t.Context(), int64(ttl/time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok, err := st.ClaimName(t.Context(), "died", "host h, pid 1", g.ID); err != nil || !ok {
			t.Fatalf("claim the dead replica's name: claimed %v, %v", ok, err)
		}
		died := time.Now()
		var logs syncBuffer
		_, st2, err := joinNamed(t, prefix, "died", slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil {
			t.Fatalf("join as the dead replica's name: %v", err)
		}
		took := time.Since(died)
		t.Logf("joined %v after the dead replica's last keepalive (TTL %v)", took, ttl)
		if took > ttl+3*time.Second {
			t.Errorf("join took %v, over the dead replica's TTL (%v) and 3s", took, ttl)
		}
		ended, err := shared.TimeToLive(t.Context(), g.ID)
		if err != nil {
			t.Fatal(err)
		}
		if _, lease := nameKey(t, prefix, "died"); ended.TTL > 0 || lease != st2.Lease() {
			t.Errorf("joined while the dead replica's lease had %ds left; the name is under lease %x, the new replica's is %x", ended.TTL, int64(lease), int64(st2.Lease()))
		}
		if !strings.Contains(logs.String(), "waiting for its etcd lease to end") {
			t.Errorf("the join did not say it waited for the dead replica's lease:\n%s", logs.String())
		}
	})
}

// TestNameTakenWhileLeaseLost: a replica that lost its lease claims its
// name again with the new one. When another server took the name
// meanwhile, and keeps its lease alive, it drives nothing (not Holding),
// saying so, until that one's lease ends; then it holds its name again.
func TestNameTakenWhileLeaseLost(t *testing.T) {
	prefix := "/names-" + t.Name() + "/"
	var logs syncBuffer
	rep, st, err := joinNamed(t, prefix, "a", slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	// The twin: the lease ends, nobody takes the name, and the replica
	// holds it again under its new lease.
	lost := st.Lease()
	if _, err := shared.Revoke(t.Context(), lost); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the replica holds its name under a new lease", func() bool {
		_, lease := nameKey(t, prefix, "a")
		return rep.Holding() && lease != 0 && lease != lost && lease == st.Lease()
	})
	// Another server takes the name (its key now under that server's
	// lease), then this one's lease ends.
	other, err := shared.Grant(t.Context(), int64(ttl/time.Second))
	if err != nil {
		t.Fatal(err)
	}
	alive, stopOther := context.WithCancel(t.Context())
	defer stopOther()
	if _, err := shared.KeepAlive(alive, other.ID); err != nil {
		t.Fatal(err)
	}
	key := prefix + "replica/a"
	if _, err := shared.Put(t.Context(), key, "host other, pid 2", clientv3.WithLease(other.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := shared.Revoke(t.Context(), st.Lease()); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the replica says another server took its name", func() bool {
		return strings.Contains(logs.String(), "another server took its name")
	})
	if rep.Holding() {
		t.Fatal("the replica holds a lease though another server has its name")
	}
	if _, lease := nameKey(t, prefix, "a"); lease != other.ID {
		t.Fatalf("the name is under lease %x, want the other server's %x", int64(lease), int64(other.ID))
	}
	stopOther()
	if _, err := shared.Revoke(t.Context(), other.ID); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the replica holds its name again once the other's lease ended", func() bool {
		_, lease := nameKey(t, prefix, "a")
		return rep.Holding() && lease == st.Lease()
	})
}

// waitUntil polls ok until it holds, failing the test after 15s.
func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 15s for: %s", what)
		}
		pauseFor(t, 20*time.Millisecond)
	}
}

// pauseFor waits d, or until the test ends.
func pauseFor(t *testing.T, d time.Duration) {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-t.Context().Done():
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's writes while the test
// reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
