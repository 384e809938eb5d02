// Package catalog holds the named tasks an operator publishes for agents
// and people to start (rein serve --tasks DIR): each a task contract, a
// description, a JSON Schema for its inputs, and the tenants and roles
// that may start it. Every face (the API's StartRun with a task, MCP,
// A2A) reads the same catalog.
//
// A catalog is immutable once loaded; a Holder swaps in a whole new one on
// Reload, or keeps the one in force when the directory is refused. A run
// started from a task records the task's name and the digest of its file
// in the contract's labels (LabelTask, LabelDigest).
package catalog

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/google/jsonschema-go/jsonschema"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/auth"
)

// The labels a run started from a task carries.
const (
	// LabelTask is the task's name.
	LabelTask = "rein.task"
	// LabelDigest is the digest of the task's file ("sha256:HEX") when the
	// run started.
	LabelDigest = "rein.task_digest"
)

// namePattern is a task's name: it becomes part of a tool's name on the
// MCP face (start_NAME), so it keeps to what every client accepts.
var namePattern = regexp.MustCompile(`^[a-z0-9_]{1,48}$`)

// MaxFileBytes bounds one task file.
const MaxFileBytes = 1 << 20

// Task is one named task of the catalog.
type Task struct {
	// Name is the name a caller starts it by.
	Name string
	// Description says what it does, for people and agents choosing.
	Description string
	// Digest is "sha256:" and the hex SHA-256 of the task's file.
	Digest string
	// Path is the file it was read from.
	Path string
	// InputSchema is the JSON Schema of its inputs, as written.
	InputSchema *structpb.Struct
	// Tenants may start it; empty means every tenant.
	Tenants []string
	// Roles: a principal needs one of them to see or start it; empty
	// means any.
	Roles []auth.Role

	contract *reinv1.TaskContract
	schema   *jsonschema.Resolved
}

// Allows reports whether p may see and start t: its tenant is one of t's
// tenants and it holds one of t's roles (either list empty: any). Whether
// p may start runs at all is the API's own rule (StartRun's role).
func (t *Task) Allows(p auth.Principal) bool {
	if len(t.Tenants) > 0 && !slices.Contains(t.Tenants, p.Tenant) {
		return false
	}
	if len(t.Roles) == 0 {
		return true
	}
	return slices.ContainsFunc(t.Roles, p.Has)
}

// InputError is inputs that break a task's schema: Field is the path of
// the offending value ("inputs" or "inputs.amount"), Reason what is wrong.
type InputError struct {
	Field  string
	Reason string
}

func (e *InputError) Error() string { return e.Field + ": " + e.Reason }

// Contract is the contract of a run of t with inputs: t's own, with
// inputs validated against t's schema and laid over the contract's
// inputs (a key given replaces the task's default), and the task's name
// and digest in its labels. Inputs that break the schema are an
// *InputError.
func (t *Task) Contract(inputs *structpb.Struct) (*reinv1.TaskContract, error) {
	given := inputs.AsMap()
	if given == nil {
		given = map[string]any{}
	}
	if t.schema != nil {
		if err := t.schema.Validate(given); err != nil {
			return nil, inputError(err)
		}
	}
	c := proto.CloneOf(t.contract)
	if len(given) > 0 {
		if c.Inputs == nil {
			c.Inputs = &structpb.Struct{}
		}
		if c.Inputs.Fields == nil {
			c.Inputs.Fields = map[string]*structpb.Value{}
		}
		for k, v := range inputs.GetFields() {
			c.Inputs.Fields[k] = proto.CloneOf(v)
		}
	}
	if c.Labels == nil {
		c.Labels = map[string]string{}
	}
	c.Labels[LabelTask] = t.Name
	c.Labels[LabelDigest] = t.Digest
	return c, nil
}

// schemaStep is one "validating /properties/x" of jsonschema's error
// chain.
var schemaStep = regexp.MustCompile(`validating (/[^:]*)`)

// inputError names, from jsonschema's error, the input it is about: the
// deepest schema location that is a chain of properties and items, as a
// field path under inputs.
func inputError(err error) *InputError {
	msg := err.Error()
	field := "inputs"
	for _, m := range schemaStep.FindAllStringSubmatch(msg, -1) {
		path, ok := fieldPath(m[1])
		if !ok {
			break
		}
		field = "inputs" + path
	}
	reason := msg
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		// The innermost cause, after the chain of "validating …: ".
		parts := strings.Split(msg, ": ")
		for j := range parts {
			if !strings.HasPrefix(parts[j], "validating ") {
				reason = strings.Join(parts[j:], ": ")
				break
			}
		}
	}
	// A missing or an unexpected property is reported at the object
	// that lacks or holds it: name the property, the field a caller
	// must fix.
	if m := namedProperty.FindStringSubmatch(reason); m != nil {
		field += "." + m[1]
	}
	return &InputError{Field: field, Reason: reason}
}

// namedProperty is the first property of jsonschema's "missing
// properties" (required) or "unexpected additional properties"
// (additionalProperties) reason.
var namedProperty = regexp.MustCompile(`^(?:required: missing properties|unexpected additional properties):? \["((?:[^"\\]|\\.)*)"`)

// fieldPath turns a schema pointer of properties and items
// ("/properties/a/items/properties/b") into ".a[].b".
func fieldPath(pointer string) (string, bool) {
	parts := strings.Split(strings.TrimPrefix(pointer, "/"), "/")
	var b strings.Builder
	for i := 0; i < len(parts); i++ {
		switch parts[i] {
		case "properties":
			if i+1 >= len(parts) {
				return "", false
			}
			b.WriteString("." + strings.NewReplacer("~1", "/", "~0", "~").Replace(parts[i+1]))
			i++
		case "items":
			b.WriteString("[]")
		default:
			return "", false
		}
	}
	return b.String(), true
}

// Catalog is a set of tasks, by name.
type Catalog struct {
	tasks map[string]*Task
	names []string
}

// Get is the task of that name.
func (c *Catalog) Get(name string) (*Task, bool) {
	t, ok := c.tasks[name]
	return t, ok
}

// List is the tasks p may start, by name.
func (c *Catalog) List(p auth.Principal) []*Task {
	var out []*Task
	for _, n := range c.names {
		if t := c.tasks[n]; t.Allows(p) {
			out = append(out, t)
		}
	}
	return out
}

// Len is how many tasks c holds.
func (c *Catalog) Len() int { return len(c.names) }

// Names are the names of c's tasks, sorted.
func (c *Catalog) Names() []string { return slices.Clone(c.names) }

// Load reads every *.json file of dir as a task (Parse). A file that is
// refused refuses the whole catalog, naming its path (and line, where
// one applies); two files of one name too.
func Load(dir string) (*Catalog, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read the tasks directory: %w", err)
	}
	c := &Catalog{tasks: map[string]*Task{}}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		data, err := readBounded(path)
		if err != nil {
			return nil, err
		}
		t, err := Parse(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		t.Path = path
		if prev, dup := c.tasks[t.Name]; dup {
			return nil, fmt.Errorf("%s: task %q is already defined by %s; give each task its own name", path, t.Name, prev.Path)
		}
		c.tasks[t.Name] = t
		c.names = append(c.names, t.Name)
	}
	sort.Strings(c.names)
	return c, nil
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read a task file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read a task file: %w", err)
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%s: a task file holds at most %d bytes", path, MaxFileBytes)
	}
	return data, nil
}

// Holder holds the catalog in force and reloads it from its directory on
// request. Readers take the current Catalog without a lock.
type Holder struct {
	dir string
	cur atomic.Pointer[Catalog]
	// mu serialises Reload, so that two reloads store in the order they
	// read, and guards changed.
	mu sync.Mutex
	// changed is closed when a reload stores a catalog, and replaced.
	changed chan struct{}
}

// NewHolder loads dir (Load) into a Holder. With dir "" the catalog is
// empty and Reload does nothing.
func NewHolder(dir string) (*Holder, error) {
	h := &Holder{dir: dir, changed: make(chan struct{})}
	c := &Catalog{tasks: map[string]*Task{}}
	if dir != "" {
		var err error
		if c, err = Load(dir); err != nil {
			return nil, err
		}
	}
	h.cur.Store(c)
	return h, nil
}

// Dir is the directory the catalog is read from.
func (h *Holder) Dir() string { return h.dir }

// Current is the catalog in force.
func (h *Holder) Current() *Catalog { return h.cur.Load() }

// Reload reads the directory again. When it is refused, the previous
// catalog stays in force and the error says why.
func (h *Holder) Reload() (*Catalog, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.dir == "" {
		return h.Current(), nil
	}
	c, err := Load(h.dir)
	if err != nil {
		return nil, err
	}
	h.cur.Store(c)
	close(h.changed)
	h.changed = make(chan struct{})
	return c, nil
}

// Changed is a channel closed when a reload next stores a catalog: take it,
// read Current, and wait on it.
func (h *Holder) Changed() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.changed
}

// ErrNoTask is a task name the catalog does not hold, or one the caller
// may not see.
var ErrNoTask = errors.New("no such task")

// digest is a file's digest as a run records it.
func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}
