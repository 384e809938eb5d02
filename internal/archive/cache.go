package archive

import (
	"container/list"
	"sync"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// cache keeps the exports read last, up to a number of bytes (their size in
// the archive), evicting the least recently read.
type cache struct {
	mu    sync.Mutex
	limit int
	size  int
	order *list.List               // of *cached, most recent first
	byKey map[string]*list.Element // guarded by mu
}

type cached struct {
	key, sum string
	x        *reinv1.RunExport
	size     int
}

func newCache(limit int) *cache {
	return &cache{limit: limit, order: list.New(), byKey: map[string]*list.Element{}}
}

// get returns the export under key if it is the one with that checksum.
// The export is shared: callers must not change it.
func (c *cache) get(key, sum string) *reinv1.RunExport {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[key]
	if !ok || e.Value.(*cached).sum != sum {
		return nil
	}
	c.order.MoveToFront(e)
	return e.Value.(*cached).x
}

func (c *cache) put(key, sum string, x *reinv1.RunExport, size int) {
	if size > c.limit {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropLocked(key)
	c.byKey[key] = c.order.PushFront(&cached{key: key, sum: sum, x: x, size: size})
	c.size += size
	for c.size > c.limit {
		c.dropLocked(c.order.Back().Value.(*cached).key)
	}
}

func (c *cache) drop(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropLocked(key)
}

func (c *cache) dropLocked(key string) {
	if e, ok := c.byKey[key]; ok {
		c.size -= e.Value.(*cached).size
		c.order.Remove(e)
		delete(c.byKey, key)
	}
}
