package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"text/template"

	"google.golang.org/protobuf/types/known/structpb"
)

// FixtureResult is one scripted result of a fixture tool: Output or Error for
// a read; Preview and Receipt for a write, or Preview and Refused for a write
// its tool refuses at commit (nothing written, ErrRefused). A string in a
// Preview or a Receipt may be a Go text/template over the call's arguments
// ("{{.amount}}"): the tool renders it for each call, so a revised write's
// preview and receipt follow its arguments; a string with no action is
// returned as written.
type FixtureResult struct {
	Output  *structpb.Value
	Error   string
	Preview *structpb.Value
	Receipt *structpb.Value
	Refused string
}

// Fixtures is an Executor whose tools return scripted results: the Nth call
// to a tool in a run gets its Nth result, and the last result repeats. It is
// deterministic across restarts because the index comes from the run's log.
type Fixtures struct {
	results map[string][]FixtureResult

	// mu guards committed and ledger.
	mu sync.Mutex
	// committed is every operation ID committed, with its receipt: Commit
	// with a key already committed returns the first receipt and writes
	// nothing (idempotency), and Lookup answers from it.
	committed map[string]*structpb.Value
	// ledger, when set, records every Commit call, one line each:
	// "OPERATION_ID\tTOOL\tapplied|repeat", synced before Commit returns.
	// Several processes may share it (servers over one store): each Commit
	// and Lookup reads it again under an advisory lock of the file, so a
	// write one committed counts as committed in all.
	ledger *os.File
	// read is how much of the ledger committed reflects.
	read int64
}

var (
	_ Executor = (*Fixtures)(nil)
	_ Looker   = (*Fixtures)(nil)
)

// NewFixtures returns an executor over results, keyed by tool name.
func NewFixtures(results map[string][]FixtureResult) *Fixtures {
	return &Fixtures{results: results, committed: map[string]*structpb.Value{}}
}

// WithLedger makes the fixtures' writes durable in a ledger file, so that
// they survive a restart of the process: the operations it lists count as
// committed, and each Commit call appends a line. A test reads it to check
// that every approved write was committed exactly once.
func (f *Fixtures) WithLedger(path string) (*Fixtures, error) {
	file, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the fixture ledger: %w", err)
	}
	f.ledger = file
	unlock, err := lockLedger(file, false)
	if err != nil {
		_ = file.Close()
		return nil, err
	}
	defer unlock()
	if err := f.catchUp(); err != nil {
		_ = file.Close()
		return nil, err
	}
	return f, nil
}

// catchUp reads the lines other processes added to the ledger since it
// was last read. f.mu and the ledger's lock must be held.
func (f *Fixtures) catchUp() error {
	info, err := f.ledger.Stat()
	if err != nil {
		return fmt.Errorf("read the fixture ledger: %w", err)
	}
	if info.Size() <= f.read {
		return nil
	}
	data := make([]byte, info.Size()-f.read)
	n, err := f.ledger.ReadAt(data, f.read)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read the fixture ledger: %w", err)
	}
	data = data[:n]
	// Only whole lines: a line being written is read next time.
	end := strings.LastIndexByte(string(data), '\n') + 1
	for _, line := range strings.Split(string(data[:end]), "\n") {
		fields := strings.Split(line, "\t")
		if len(fields) == 3 && fields[2] == "applied" {
			r, _ := f.result(Call{Tool: fields[1], Index: 0})
			f.committed[fields[0]] = r.Receipt
		}
	}
	f.read += int64(end)
	return nil
}

// ParseFixtures reads the fixture file format: a JSON object mapping a tool's
// name to a list of results, each {"output": any}, {"error": "message"} or,
// for a write, {"preview": any, "receipt": any} or {"preview": any,
// "refused": "reason"}.
func ParseFixtures(data []byte) (*Fixtures, error) {
	var raw map[string][]map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("fixtures must be a JSON object mapping a tool name to a list of results: %w", err)
	}
	out := map[string][]FixtureResult{}
	for name, list := range raw {
		if len(list) == 0 {
			return nil, fmt.Errorf("fixtures.%s: the list of results is empty; give at least one", name)
		}
		for i, r := range list {
			var fr FixtureResult
			for key, val := range r {
				v := &structpb.Value{}
				if err := v.UnmarshalJSON(val); err != nil {
					return nil, fmt.Errorf("fixtures.%s[%d].%s: %w", name, i, key, err)
				}
				switch key {
				case "output":
					fr.Output = v
				case "preview":
					fr.Preview = v
				case "receipt":
					fr.Receipt = v
				case "error", "refused":
					s, ok := v.GetKind().(*structpb.Value_StringValue)
					if !ok {
						return nil, fmt.Errorf("fixtures.%s[%d].%s: must be a string", name, i, key)
					}
					if key == "error" {
						fr.Error = s.StringValue
					} else {
						fr.Refused = s.StringValue
					}
				default:
					return nil, fmt.Errorf("fixtures.%s[%d]: unknown field %q; use output, error, preview, receipt or refused", name, i, key)
				}
			}
			if fr.Refused != "" && (fr.Receipt != nil || fr.Output != nil || fr.Error != "") {
				return nil, fmt.Errorf("fixtures.%s[%d]: refused is a write refused at commit; give it with preview only", name, i)
			}
			for key, v := range map[string]*structpb.Value{"preview": fr.Preview, "receipt": fr.Receipt} {
				if _, err := render(v, nil, false); err != nil {
					return nil, fmt.Errorf("fixtures.%s[%d].%s: %w", name, i, key, err)
				}
			}
			if fr.Output == nil && fr.Error == "" && fr.Preview == nil && fr.Receipt == nil {
				return nil, fmt.Errorf("fixtures.%s[%d]: empty result; give output, error, or preview and receipt", name, i)
			}
			out[name] = append(out[name], fr)
		}
	}
	return NewFixtures(out), nil
}

func (f *Fixtures) result(call Call) (FixtureResult, error) {
	list, ok := f.results[call.Tool]
	if !ok {
		return FixtureResult{}, fmt.Errorf("%w: %q (fixtures exist for: %s)", ErrNoTool, call.Tool, strings.Join(f.names(), ", "))
	}
	i := call.Index
	if i >= len(list) {
		i = len(list) - 1
	}
	return list[i], nil
}

func (f *Fixtures) names() []string {
	names := make([]string, 0, len(f.results))
	for n := range f.results {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// List implements Executor.
func (f *Fixtures) List(context.Context) ([]Spec, error) {
	specs := make([]Spec, 0, len(f.results))
	for _, n := range f.names() {
		specs = append(specs, Spec{Name: n, Description: "fixture", Server: "fixture"})
	}
	return specs, nil
}

// Read implements Executor.
func (f *Fixtures) Read(ctx context.Context, call Call) (*structpb.Value, error) {
	r, err := f.result(call)
	if err != nil {
		return nil, err
	}
	if r.Error != "" {
		return nil, errors.New(r.Error)
	}
	return r.Output, ctx.Err()
}

// Propose implements Executor.
func (f *Fixtures) Propose(ctx context.Context, call Call) (*structpb.Value, error) {
	r, err := f.result(call)
	if err != nil {
		return nil, err
	}
	if r.Error != "" {
		return nil, errors.New(r.Error)
	}
	preview, err := render(r.Preview, call.Args, true)
	if err != nil {
		return nil, fmt.Errorf("fixture tool %s cannot preview these arguments: %w", call.Tool, err)
	}
	return preview, ctx.Err()
}

// Commit implements Executor. It is idempotent on operationID.
func (f *Fixtures) Commit(ctx context.Context, call Call, operationID string) (*structpb.Value, error) {
	r, err := f.result(call)
	if err != nil {
		return nil, err
	}
	if r.Error != "" {
		return nil, errors.New(r.Error)
	}
	if r.Refused != "" {
		return nil, fmt.Errorf("%w: %s", ErrRefused, r.Refused)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ledger != nil {
		unlock, err := lockLedger(f.ledger, true)
		if err != nil {
			return nil, err
		}
		defer unlock()
		if err := f.catchUp(); err != nil {
			return nil, err
		}
	}
	receipt, repeat := f.committed[operationID]
	if !repeat {
		if receipt, err = render(r.Receipt, call.Args, true); err != nil {
			return nil, fmt.Errorf("fixture tool %s cannot write these arguments, and wrote nothing: %w", call.Tool, err)
		}
	}
	if f.ledger != nil {
		kind := "applied"
		if repeat {
			kind = "repeat"
		}
		if _, err := fmt.Fprintf(f.ledger, "%s\t%s\t%s\n", operationID, call.Tool, kind); err != nil {
			return nil, err
		}
		if err := f.ledger.Sync(); err != nil {
			return nil, err
		}
		if info, err := f.ledger.Stat(); err == nil {
			f.read = info.Size() // what it wrote is read; under the lock, no one else wrote
		}
	}
	f.committed[operationID] = receipt
	return receipt, nil
}

// Lookup implements Looker.
func (f *Fixtures) Lookup(ctx context.Context, _ Call, operationID string) (*structpb.Value, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ledger != nil {
		unlock, err := lockLedger(f.ledger, false)
		if err != nil {
			return nil, false, err
		}
		defer unlock()
		if err := f.catchUp(); err != nil {
			return nil, false, err
		}
	}
	receipt, ok := f.committed[operationID]
	return receipt, ok, ctx.Err()
}

// Close closes the ledger file, if any.
func (f *Fixtures) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ledger == nil {
		return nil
	}
	err := f.ledger.Close()
	f.ledger = nil
	return err
}

// render is v with each string that holds a template action ("{{") run as
// a text/template over args, which must have every field it names; with
// run false it only parses them. v itself is not changed.
func render(v *structpb.Value, args *structpb.Struct, run bool) (*structpb.Value, error) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		if !strings.Contains(k.StringValue, "{{") {
			return v, nil
		}
		t, err := template.New("fixture").Option("missingkey=error").Parse(k.StringValue)
		if err != nil || !run {
			return v, err
		}
		var b strings.Builder
		if err := t.Execute(&b, args.AsMap()); err != nil {
			return nil, err
		}
		return structpb.NewStringValue(b.String()), nil
	case *structpb.Value_StructValue:
		out := &structpb.Struct{Fields: make(map[string]*structpb.Value, len(k.StructValue.GetFields()))}
		for name, f := range k.StructValue.GetFields() {
			r, err := render(f, args, run)
			if err != nil {
				return nil, err
			}
			out.Fields[name] = r
		}
		return structpb.NewStructValue(out), nil
	case *structpb.Value_ListValue:
		out := &structpb.ListValue{Values: make([]*structpb.Value, len(k.ListValue.GetValues()))}
		for i, f := range k.ListValue.GetValues() {
			r, err := render(f, args, run)
			if err != nil {
				return nil, err
			}
			out.Values[i] = r
		}
		return structpb.NewListValue(out), nil
	}
	return v, nil
}
