package tenants

import (
	"sync"
	"sync/atomic"
	"time"
)

// Holder holds the current settings of one tenants file and reloads them
// on request. Readers take the current Settings without a lock; a reload
// swaps in a whole new one, or, when the file is refused, keeps the one in
// force.
type Holder struct {
	path string
	base Lifecycle
	cur  atomic.Pointer[Settings]
	// mu serialises Reload, so that two reloads store in the order they
	// read.
	mu sync.Mutex
}

// NewHolder loads the tenants file at path (Load) into a Holder whose
// lookups fall back to base, the server's flags. With path "" there is no
// file: every tenant resolves to base, and Reload does nothing.
func NewHolder(path string, base Lifecycle) (*Holder, error) {
	h := &Holder{path: path, base: base}
	s := &Settings{}
	if path != "" {
		var err error
		if s, err = Load(path); err != nil {
			return nil, err
		}
	}
	h.cur.Store(s.withBase(base))
	return h, nil
}

// Path is the file's path ("" for none).
func (h *Holder) Path() string { return h.path }

// Current is the settings in force.
func (h *Holder) Current() *Settings { return h.cur.Load() }

// Lifecycle is tenant's lifecycle in the settings in force
// (Settings.Lifecycle).
func (h *Holder) Lifecycle(tenant string) (archiveAfter, retain time.Duration, archiveOn, retainOn bool) {
	return h.Current().Lifecycle(tenant)
}

// Reload reads the file again. When it is refused, the previous settings
// stay in force and the error says why; otherwise the new settings are in
// force when it returns, and are returned.
func (h *Holder) Reload() (*Settings, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.path == "" {
		return h.Current(), nil
	}
	s, err := Load(h.path)
	if err != nil {
		return nil, err
	}
	s = s.withBase(h.base)
	h.cur.Store(s)
	return s, nil
}
