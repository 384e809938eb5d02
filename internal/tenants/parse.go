package tenants

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"

	"github.com/reinhq/rein/internal/configfile"
)

// file is the TOML shape of a tenants file.
type file struct {
	Defaults table            `toml:"defaults"`
	Tenants  map[string]table `toml:"tenants"`
}

// table is one [defaults] or [tenants.NAME] table as written. Values are
// checked after decoding (table.settings), where each error is given its
// line from the document (lines).
type table struct {
	ArchiveAfter *duration `toml:"archive_after"`
	Retain       *duration `toml:"retain"`
	MaxRunning   *int64    `toml:"max_running"`
	Weight       *float64  `toml:"weight"`
	Requests     *float64  `toml:"requests_per_minute"`
	Tokens       *float64  `toml:"tokens_per_minute"`
}

// duration is a duration as written: a Go duration string ("90m", "0s").
// It is a string so that any other TOML type is refused by the decoder,
// with its line.
type duration string

// durationHint says how a duration is written.
const durationHint = `a string such as "90m", "24h" or "0s"`

// Error is a refused tenants file: the file, the line (0 when it is not
// known) and what is wrong.
type Error = configfile.Error

// Parse parses the tenants file data; name is the file's name in errors.
// Every error is an *Error.
func Parse(name string, data []byte) (*Settings, error) {
	var f file
	dec := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, decodeError(name, err)
	}
	s := &Settings{name: name, tenants: make(map[string]Tenant, len(f.Tenants))}
	var probs []problem
	s.defaults, probs = f.Defaults.settings([]string{"defaults"}, probs)
	for tenant, t := range f.Tenants {
		path := []string{"tenants", tenant}
		if tenant == "" {
			probs = append(probs, problem{path: path, msg: `a tenant's name is empty: write [tenants.NAME] with the tenant's name as its tokens file gives it`})
			continue
		}
		s.tenants[tenant], probs = t.settings(path, probs)
	}
	if len(probs) > 0 {
		return nil, firstProblem(name, data, probs)
	}
	return s, nil
}

// problem is a value refused after decoding, at the key path.
type problem struct {
	path []string
	msg  string
}

// settings checks t, the table at path, and returns what it sets; it
// appends what it refuses to probs.
func (t table) settings(path []string, probs []problem) (Tenant, []problem) {
	var out Tenant
	var p *problem
	if out.Lifecycle.ArchiveAfter, p = t.ArchiveAfter.check(path, "archive_after"); p != nil {
		probs = append(probs, *p)
	}
	if out.Lifecycle.Retain, p = t.Retain.check(path, "retain"); p != nil {
		probs = append(probs, *p)
	}
	if n := t.MaxRunning; n != nil {
		if *n < 0 || *n > MaxMaxRunning {
			probs = append(probs, problem{path: append(slices.Clone(path), "max_running"),
				msg: fmt.Sprintf("max_running in %s: %d is out of range; give 0 (no limit) to %d", tableName(path), *n, MaxMaxRunning)})
		} else {
			v := int(*n)
			out.Admission.MaxRunning = &v
		}
	}
	if w := t.Weight; w != nil {
		if !(*w > 0) || *w > MaxWeight {
			probs = append(probs, problem{path: append(slices.Clone(path), "weight"),
				msg: fmt.Sprintf("weight in %s: %v is out of range; give a number above 0 and at most %d (the default is 1)", tableName(path), *w, MaxWeight)})
		} else {
			out.Admission.Weight = w
		}
	}
	for _, r := range []struct {
		key string
		v   *float64
		to  **float64
	}{{"requests_per_minute", t.Requests, &out.Admission.RequestsPerMinute}, {"tokens_per_minute", t.Tokens, &out.Admission.TokensPerMinute}} {
		if r.v == nil {
			continue
		}
		if *r.v < 0 || *r.v > MaxPerMinute {
			probs = append(probs, problem{path: append(slices.Clone(path), r.key),
				msg: fmt.Sprintf("%s in %s: %v is out of range; give 0 (no limit) to %d", r.key, tableName(path), *r.v, int64(MaxPerMinute))})
			continue
		}
		*r.to = r.v
	}
	return out, probs
}

// MaxPerMinute bounds the model-rate keys.
const MaxPerMinute = 1e12

// The bounds on the admission keys.
const (
	MaxMaxRunning = 1_000_000
	MaxWeight     = 1000
)

// check parses d, the value of key in the table at path: nil when the key
// is not set, a problem when it is not a duration of 0 or more.
func (d *duration) check(path []string, key string) (*time.Duration, *problem) {
	if d == nil {
		return nil, nil
	}
	at := append(slices.Clone(path), key)
	v, err := time.ParseDuration(string(*d))
	if err != nil {
		return nil, &problem{path: at, msg: fmt.Sprintf("%s in %s: %q is not a duration; want %s", key, tableName(path), string(*d), durationHint)}
	}
	if v < 0 {
		return nil, &problem{path: at, msg: fmt.Sprintf("%s in %s: %q is negative; give 0s (at once) or more", key, tableName(path), string(*d))}
	}
	return &v, nil
}

// firstProblem is the problem earliest in the file, as an *Error.
func firstProblem(name string, data []byte, probs []problem) error {
	at := lines(data)
	best, bestLine := probs[0], at.of(probs[0].path)
	for _, p := range probs[1:] {
		if l := at.of(p.path); l > 0 && (bestLine == 0 || l < bestLine) {
			best, bestLine = p, l
		}
	}
	return &Error{File: name, Line: bestLine, Msg: best.msg}
}

// decodeError is a decoder's error as an *Error with its line.
func decodeError(name string, err error) error {
	var se *toml.StrictMissingError
	if errors.As(err, &se) && len(se.Errors) > 0 {
		e := se.Errors[0]
		row, _ := e.Position()
		return &Error{File: name, Line: row, Msg: unknownKey(e.Key())}
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		row, _ := de.Position()
		msg := strings.TrimPrefix(de.Error(), "toml: ")
		if got, ok := strings.CutPrefix(msg, "cannot decode TOML "); ok {
			got, _, _ = strings.Cut(got, " ")
			msg = mismatch(de.Key(), got)
		}
		return &Error{File: name, Line: row, Msg: msg}
	}
	return &Error{File: name, Msg: err.Error()}
}

// mismatch says that the value at key is a TOML got (integer, boolean, …)
// where the file wants another type.
func mismatch(key toml.Key, got string) string {
	where, want := "the value", "another type"
	switch {
	case len(key) == 1:
		where, want = quoteKey(key[0]), "a table"
	case len(key) == 2 && key[0] == "tenants":
		where, want = tableName(key), "a table of the tenant's keys"
	case len(key) > 1:
		where = fmt.Sprintf("%s in %s", key[len(key)-1], tableName(key[:len(key)-1]))
		switch k := key[len(key)-1]; {
		case slices.Contains(durationKeys(), k):
			want = "a duration, " + durationHint
		case k == "max_running":
			want = "an integer, such as 4 (0: no limit)"
		case k == "weight":
			want = "a number above 0, such as 1 or 2.5"
		case k == "requests_per_minute" || k == "tokens_per_minute":
			want = "a number, 0 (no limit) or more, such as 600"
		}
	}
	return fmt.Sprintf("%s is a TOML %s; want %s", where, got, want)
}

// unknownKey says that key (a path, as the decoder gives it) is not one
// the file takes, and which are. A key under a table's own key (a table
// nested in [tenants.acme]) is reported as that key.
func unknownKey(key toml.Key) string {
	var in []string
	switch {
	case len(key) >= 2 && key[0] == "defaults":
		in = key[:1]
	case len(key) >= 3 && key[0] == "tenants":
		in = key[:2]
	case len(key) == 2 && key[0] == "tenants":
		// An inline table (tenants.acme = {…}): the decoder's path leaves
		// the tenant out.
		return fmt.Sprintf("unknown key %q in a [tenants.NAME] table; the keys are %s", key[1], strings.Join(keys(), ", "))
	case len(key) > 0:
		return fmt.Sprintf("unknown key %q; the file holds a [defaults] table and [tenants.NAME] tables", key[0])
	default:
		return "unknown key"
	}
	return fmt.Sprintf("unknown key %q in %s; the keys are %s", key[len(in)], tableName(in), strings.Join(keys(), ", "))
}

// keys are the keys a table takes, as the tags of table give them.
func keys() []string {
	var out []string
	t := reflect.TypeFor[table]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("toml"), ",")
		out = append(out, name)
	}
	return out
}

// durationKeys are the keys whose value is a duration.
func durationKeys() []string {
	var out []string
	t := reflect.TypeFor[table]()
	for i := range t.NumField() {
		if f := t.Field(i); f.Type == reflect.TypeFor[*duration]() {
			name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			out = append(out, name)
		}
	}
	return out
}

// tableName is the header of the table at path, as TOML writes it:
// [tenants.acme], [tenants."a.b"].
func tableName(path []string) string {
	parts := make([]string, len(path))
	for i, p := range path {
		parts[i] = quoteKey(p)
	}
	return "[" + strings.Join(parts, ".") + "]"
}

// quoteKey is k as a TOML key: bare when it may be, else quoted.
func quoteKey(k string) string {
	if k == "" {
		return `""`
	}
	for _, c := range k {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Sprintf("%q", k)
		}
	}
	return k
}

// keyLines maps a key path (its parts joined by NUL) to the line where the
// document first names it.
type keyLines map[string]int

// of is the line of path, 0 when the document does not name it.
func (k keyLines) of(path []string) int { return k[strings.Join(path, "\x00")] }

// lines indexes where a document that decodes names each key path: a
// table's header, each key of a key/value (and each prefix of a dotted
// one), and the keys in inline tables.
func lines(data []byte) keyLines {
	out := keyLines{}
	var p unstable.Parser
	p.Reset(data)
	var table []string
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			table = out.note(&p, nil, e.Key())
		case unstable.KeyValue:
			out.keyValue(&p, table, e)
		}
	}
	return out
}

// keyValue notes the keys of the key/value e in the table at prefix, and
// of the inline tables it holds.
func (k keyLines) keyValue(p *unstable.Parser, prefix []string, e *unstable.Node) {
	path := k.note(p, prefix, e.Key())
	if v := e.Value(); v.Kind == unstable.InlineTable {
		for it := v.Children(); it.Next(); {
			if c := it.Node(); c.Kind == unstable.KeyValue {
				k.keyValue(p, path, c)
			}
		}
	}
}

// note records the line of each prefix of prefix+key not yet seen, and
// returns the whole path.
func (k keyLines) note(p *unstable.Parser, prefix []string, key unstable.Iterator) []string {
	path := slices.Clone(prefix)
	for key.Next() {
		n := key.Node()
		path = append(path, string(n.Data))
		id := strings.Join(path, "\x00")
		if _, seen := k[id]; !seen {
			k[id] = p.Shape(n.Raw).Start.Line
		}
	}
	return path
}
