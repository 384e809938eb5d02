package bolt

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	bbolt "go.etcd.io/bbolt"
)

// mergeModel is a bucket's keys as a read must see them, with a nested
// bucket's keys under it (nil when there is none).
type mergeModel struct {
	keys   map[string]string
	nested map[string]string
}

// mergeRig is a bbolt file with a write transaction open, as the writer
// keeps one, and the overlay of what it wrote since its last commit: the
// checkpoint.
type mergeRig struct {
	t  *testing.T
	db *bbolt.DB
	tx *bbolt.Tx
	ov *overlay
	// w writes to tx, recording each write in its record as the writer's
	// does; the next read adds what it recorded to ov.
	w *wtx
}

func newMergeRig(t *testing.T) *mergeRig {
	t.Helper()
	db, err := bbolt.Open(filepath.Join(t.TempDir(), "merge.db"), 0o600, &bbolt.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	r := &mergeRig{t: t, db: db}
	t.Cleanup(func() {
		_ = r.tx.Rollback()
		_ = db.Close()
	})
	r.begin()
	return r
}

func (r *mergeRig) begin() {
	var err error
	if r.tx, err = r.db.Begin(true); err != nil {
		r.t.Fatal(err)
	}
	r.ov, r.w = newOverlay(), &wtx{tx: r.tx, rec: []byte{}}
}

// checkpoint commits the writes so far into the file.
func (r *mergeRig) checkpoint() {
	if err := r.tx.Commit(); err != nil {
		r.t.Fatal(err)
	}
	r.begin()
}

// bucket is the bucket name at the root of the write transaction, made if
// missing, writing through the rig's wtx, which records each write.
func (r *mergeRig) bucket(name string) *wbucket {
	if _, err := r.tx.CreateBucketIfNotExists([]byte(name)); err != nil {
		r.t.Fatal(err)
	}
	return r.w.Bucket([]byte(name))
}

// read calls fn with what a read sees: the file as last committed, under
// the overlay as it is now.
func (r *mergeRig) read(fn func(t *rtx)) {
	tx, err := r.db.Begin(false)
	if err != nil {
		r.t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	// As the first read of a snapshot adds the batches synced since the
	// last: the overlay keeps the record's bytes, so the next writes go to
	// a record of their own.
	if err := ovApply(r.ov, r.w.rec); err != nil {
		r.t.Fatalf("the writes since the last read do not decode: %v", err)
	}
	r.w = &wtx{tx: r.tx, rec: []byte{}}
	fn(&rtx{tx: tx, ov: r.ov.Copy()})
}

// check compares every way of reading bucket name with want: Get of each
// key of the universe, the keys forward and backward, a Seek to each key
// then moves both ways, and the nested bucket alike.
func (r *mergeRig) check(name string, want mergeModel, universe []string, what string) {
	r.t.Helper()
	r.read(func(t *rtx) {
		b := t.Bucket([]byte(name))
		if b == nil {
			r.t.Fatalf("%s: bucket %s is missing", what, name)
		}
		keys := want.keys
		if want.nested != nil {
			keys = maps.Clone(keys)
			keys["nested"] = isBucket
		}
		checkBucket(r.t, b, keys, append(universe, "nested"), what)
		n := b.Bucket([]byte("nested"))
		switch {
		case want.nested == nil && n != nil:
			r.t.Fatalf("%s: the dropped nested bucket is still there", what)
		case want.nested != nil && n == nil:
			r.t.Fatalf("%s: the nested bucket is missing", what)
		case n != nil:
			checkBucket(r.t, n, want.nested, universe, what+", nested")
		}
	})
}

// isBucket is the value a mergeModel's key holds when it is a nested
// bucket: a read of it is nil.
const isBucket = "\x00bucket"

func checkBucket(t *testing.T, b *rbucket, want map[string]string, universe []string, what string) {
	t.Helper()
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range universe {
		got := b.Get([]byte(k))
		v, ok := want[k]
		if v == isBucket {
			ok, v = false, ""
		}
		if ok != (got != nil) || ok && string(got) != v {
			t.Fatalf("%s: Get(%s) = %q, want %q (present %v)", what, k, got, v, ok)
		}
	}
	var fwd, back []string
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if w := want[string(k)]; w == isBucket && v != nil || w != isBucket && (v == nil || string(v) != w) {
			t.Fatalf("%s: forward, %s holds %q, want %q", what, k, v, want[string(k)])
		}
		fwd = append(fwd, string(k))
	}
	for k, _ := c.Last(); k != nil; k, _ = c.Prev() {
		back = append(back, string(k))
	}
	slices.Reverse(back)
	if !slices.Equal(fwd, keys) || !slices.Equal(back, keys) {
		t.Fatalf("%s: forward %q, backward %q, want %q", what, fwd, back, keys)
	}
	var n int
	_ = b.ForEach(func(k, v []byte) error { n++; return nil })
	if n != len(keys) {
		t.Fatalf("%s: ForEach saw %d keys, want %d", what, n, len(keys))
	}
	// A Seek to each key of the universe, then each way of moving.
	for _, seek := range universe {
		at, _ := slices.BinarySearch(keys, seek)
		for _, moves := range []string{"nnpp", "pnpn", "ppnn", "npnp"} {
			c := b.Cursor()
			k, _ := c.Seek([]byte(seek))
			pos := at
			expect := func(k []byte, step string) {
				t.Helper()
				var w []byte
				if pos >= 0 && pos < len(keys) {
					w = []byte(keys[pos])
				}
				if !bytes.Equal(k, w) {
					t.Fatalf("%s: Seek(%s) then %s: %q, want %q (keys %q)", what, seek, step, k, w, keys)
				}
			}
			expect(k, "")
			for i, m := range moves {
				if pos < 0 || pos >= len(keys) {
					break // off an end: bbolt's cursor is undefined there
				}
				if m == 'n' {
					k, _ = c.Next()
					pos++
				} else {
					k, _ = c.Prev()
					pos--
				}
				expect(k, moves[:i+1])
			}
		}
	}
}

// TestMergeCursorEveryOrder: every order of up to three puts, deletes and
// checkpoints on keys beside the file's own reads, through the overlay, as
// a map of the same writes does: Get, forward, backward, Seek and each way
// of moving from it.
func TestMergeCursorEveryOrder(t *testing.T) {
	r := newMergeRig(t)
	universe := []string{"a", "b", "c", "d", "e"}
	type op struct {
		name string
		do   func(b *wbucket, m map[string]string)
	}
	put := func(k, v string) op {
		return op{"put " + k + "=" + v, func(b *wbucket, m map[string]string) {
			if err := b.Put([]byte(k), []byte(v)); err != nil {
				t.Fatal(err)
			}
			m[k] = v
		}}
	}
	del := func(k string) op {
		return op{"delete " + k, func(b *wbucket, m map[string]string) {
			if err := b.Delete([]byte(k)); err != nil {
				t.Fatal(err)
			}
			delete(m, k)
		}}
	}
	ops := []op{put("b", "1"), put("b", "2"), del("b"), put("c", "3"), del("c"), del("a"), {name: "checkpoint"}}
	var seqs [][]int
	var gen func(prefix []int)
	gen = func(prefix []int) {
		if len(prefix) > 0 {
			seqs = append(seqs, slices.Clone(prefix))
		}
		if len(prefix) == 3 {
			return
		}
		for i := range ops {
			gen(append(prefix, i))
		}
	}
	gen(nil)
	for n, seq := range seqs {
		name := fmt.Sprintf("b%05d", n)
		// The file holds a and e, and d in the nested bucket, before the
		// sequence starts.
		b := r.bucket(name)
		m := map[string]string{"a": "0", "e": "0"}
		for k, v := range m {
			if err := b.Put([]byte(k), []byte(v)); err != nil {
				t.Fatal(err)
			}
		}
		nb, err := b.CreateBucket([]byte("nested"))
		if err != nil {
			t.Fatal(err)
		}
		if err := nb.Put([]byte("d"), []byte("0")); err != nil {
			t.Fatal(err)
		}
		r.checkpoint()
		var what []string
		for _, i := range seq {
			what = append(what, ops[i].name)
			if ops[i].do == nil {
				r.checkpoint()
			} else {
				ops[i].do(r.bucket(name), m)
			}
			r.check(name, mergeModel{keys: m, nested: map[string]string{"d": "0"}}, universe, fmt.Sprint(what))
		}
	}
}

// TestMergeCursorRandom: random writes (puts, deletes, nested buckets
// dropped and made again, sequences) across random checkpoints read as a
// map of the same writes does.
func TestMergeCursorRandom(t *testing.T) {
	r := newMergeRig(t)
	var universe []string
	for i := range 24 {
		universe = append(universe, fmt.Sprintf("k%02d", i))
	}
	for round := range 40 {
		rng := rand.New(rand.NewPCG(uint64(round), 7))
		name := fmt.Sprintf("r%02d", round)
		want := mergeModel{keys: map[string]string{}}
		var seq uint64
		r.bucket(name)
		r.checkpoint()
		var what []string
		for step := range 60 {
			b := r.bucket(name)
			k := universe[rng.IntN(len(universe))]
			v := fmt.Sprintf("v%d", step)
			switch x := rng.IntN(20); {
			case x < 9:
				if err := b.Put([]byte(k), []byte(v)); err != nil {
					t.Fatal(err)
				}
				want.keys[k] = v
				what = append(what, "put "+k)
			case x < 14:
				if err := b.Delete([]byte(k)); err != nil {
					t.Fatal(err)
				}
				delete(want.keys, k)
				what = append(what, "delete "+k)
			case x < 16:
				nb, err := b.CreateBucketIfNotExists([]byte("nested"))
				if err != nil {
					t.Fatal(err)
				}
				if err := nb.Put([]byte(k), []byte(v)); err != nil {
					t.Fatal(err)
				}
				if want.nested == nil {
					want.nested = map[string]string{}
				}
				want.nested[k] = v
				what = append(what, "nested put "+k)
			case x < 17:
				if want.nested != nil {
					if err := b.DeleteBucket([]byte("nested")); err != nil {
						t.Fatal(err)
					}
					want.nested = nil
					what = append(what, "drop nested")
				}
			case x < 18:
				if seq, _ = b.NextSequence(); seq == 0 {
					t.Fatal("no sequence")
				}
			default:
				r.checkpoint()
				what = append(what, "checkpoint")
			}
			r.check(name, want, universe, fmt.Sprintf("round %d: %v", round, what))
			r.read(func(t2 *rtx) {
				if got := t2.Bucket([]byte(name)).Sequence(); got != seq {
					t.Fatalf("round %d: sequence %d, want %d", round, got, seq)
				}
			})
		}
		r.checkpoint()
		r.check(name, want, universe, fmt.Sprintf("round %d, all checkpointed", round))
	}
}
