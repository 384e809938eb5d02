package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/reinhq/rein/internal/catalog"
	"github.com/reinhq/rein/server"
	"github.com/reinhq/rein/server/assembly"
)

// One path leaves these fields of assembly.Config (a dotted path into it)
// as the zero value, or neither path sets them, for the reason given. Every
// other field must be set by rein serve's flags and by the embedded
// server's configuration alike (TestAssemblyFields).
var (
	serveOnly = map[string]string{
		"Etcd":                   "replicas are servers that outlive a command; the embedded server is alone on its bbolt file",
		"PublicURL":              "only rein serve sends webhooks, which link to the console",
		"MaxRunning":             "admission queues runs for a server to start later; an embedded server stops with its command",
		"ModelLimits":            "model-rate limits are shared by the runs of a long-lived server and its replicas",
		"Tenants":                "--tenants is a server's file, reloaded on SIGHUP",
		"Lifecycle.Sweep":        "sweeping archives and deletes runs over hours; an embedded server lasts one command",
		"Lifecycle.ArchiveAfter": "the sweep's policy (Lifecycle.Sweep)",
		"Lifecycle.ArchiveOn":    "the sweep's policy (Lifecycle.Sweep)",
		"Lifecycle.Retain":       "the sweep's policy (Lifecycle.Sweep)",
		"Lifecycle.RetainOn":     "the sweep's policy (Lifecycle.Sweep)",
		"Lifecycle.Every":        "the sweep's policy (Lifecycle.Sweep)",
		"OTel":                   "a server exports its runs' traces; a command's embedded server exports none",
		"Listen":                 "the embedded server is served in memory to its one caller, this process",
		"AdminListen":            "the operators' port of a network server",
		"AdminSite":              "the operators' port of a network server",
		"Pprof":                  "the operators' port of a network server",
		"HTTPListen":             "the browsers' port of a network server",
		"HTTP":                   "the browsers' port of a network server",
		"Node.Directory":         "callers of a network server authenticate; the embedded server's one caller is this process, the local admin",
		"Node.RatePerSecond":     "per-principal call limits protect a shared server from its callers",
		"Node.RateBurst":         "per-principal call limits protect a shared server from its callers",
		"Node.MaxStreams":        "a network connection's stream cap; the embedded connection is this process's own",
		"Node.Reflection":        "grpcurl reaches a network server",
		"Node.Resume":            "a server carries on the runs it holds at start; a command's embedded server must not (the read-only ones cannot)",
		"Node.Logger":            "the embedded server logs nothing: its command reports on stderr",
		"Node.ServerOptions":     "TLS credentials of a network listener",
		"Node.StreamModelCalls":  "a command watches its run from the start; a server streams every call for watchers that join mid-call",
		"Node.ApprovalsNeedTwo":  "a rule among a server's several approvers (--tokens names them); the embedded server's one caller is the local admin",
		"Node.OnToolChange":      "a server's choice for the runs it carries on; a command's embedded server keeps the default, pause",
		"Node.ToolPolicy":        "the server's rules file and policy services; a command's embedded server applies each contract's own rules",
		"Node.Metrics":           "served on the operators' port (AdminListen)",
	}
	embeddedOnly = map[string]string{
		"ReadOnly": "a command that only reads opens the file read-only; a server writes",
	}
	neitherPath = map[string]string{
		"Node.Store":         "Start opens it from DB or Etcd",
		"Node.Cluster":       "Start makes it for the store it opened",
		"Node.Clock":         "tests inject it",
		"Node.Traces":        "Start sets it with OTel",
		"Node.Commits":       "Start sets it with Etcd",
		"Node.Relay":         "Start sets it with Etcd",
		"Node.Replica":       "Start sets it with Etcd",
		"Node.Owner":         "Start sets it with Etcd",
		"Node.MaxDriven":     "Start sets it with Etcd",
		"Node.Leased":        "Start sets it with Etcd",
		"Node.Admission":     "Start makes it from MaxRunning and Tenants",
		"Node.Rates":         "Start makes them from ModelLimits and Tenants",
		"Node.Archive":       "Start opens it from Lifecycle.Archive",
		"Node.Policy":        "Start makes it from Lifecycle",
		"Node.PolicySoonest": "Start makes it from Lifecycle",
		"Node.SweepEvery":    "Start sets it from Lifecycle",
	}
)

// assemblyFieldProblems checks the two paths' configurations field by
// field: a field set by one and not the other, or by neither, must be
// listed above with its reason, and a listed field must still be left.
func assemblyFieldProblems(serve, embedded assembly.Config) []string {
	var problems []string
	for _, f := range configFields(reflect.ValueOf(serve), reflect.ValueOf(embedded), "") {
		bySrv, byEmb := !f.serve.IsZero(), !f.embedded.IsZero()
		_, so := serveOnly[f.path]
		_, eo := embeddedOnly[f.path]
		_, no := neitherPath[f.path]
		switch {
		case so && byEmb:
			problems = append(problems, f.path+" is listed as rein serve's alone, but the embedded server sets it: take it off serveOnly")
		case eo && bySrv:
			problems = append(problems, f.path+" is listed as the embedded server's alone, but rein serve sets it: take it off embeddedOnly")
		case no && (bySrv || byEmb):
			problems = append(problems, f.path+" is listed as set by neither path, but one sets it: take it off neitherPath")
		case so || eo || no:
		case bySrv && !byEmb:
			problems = append(problems, f.path+" is set by rein serve and not by the embedded server: set it in embeddedConfig, or list it in serveOnly with the reason")
		case byEmb && !bySrv:
			problems = append(problems, f.path+" is set by the embedded server and not by rein serve: set it in serveOptions.config, or list it in embeddedOnly with the reason")
		case !bySrv && !byEmb:
			problems = append(problems, f.path+" is set by neither path: set it in serveOptions.config and embeddedConfig, or list it in neitherPath with the reason")
		}
	}
	return problems
}

// configField is one field of assembly.Config, as each path set it.
type configField struct {
	path            string
	serve, embedded reflect.Value
}

// configFields are the fields of two values of one struct type, walking
// into the configuration structs that assembly.Config holds by value.
func configFields(a, b reflect.Value, prefix string) []configField {
	var out []configField
	for i := range a.NumField() {
		sf := a.Type().Field(i)
		path := prefix + sf.Name
		switch sf.Type {
		case reflect.TypeFor[server.Config](), reflect.TypeFor[assembly.Lifecycle]():
			out = append(out, configFields(a.Field(i), b.Field(i), path+".")...)
		default:
			out = append(out, configField{path: path, serve: a.Field(i), embedded: b.Field(i)})
		}
	}
	return out
}

// assemblyConfigs are the configurations rein serve's flags and a
// command's embedded server map to, on the same --db and host flags.
func assemblyConfigs(t *testing.T) (serve, embedded assembly.Config) {
	t.Helper()
	db := filepath.Join(t.TempDir(), "rein.db")
	if err := os.Mkdir(defaultArchiveDir(db), 0o700); err != nil { // runs archived before: both read them
		t.Fatal(err)
	}
	prices := writeFile(t, "prices.json", `{"script/*": {"input_per_mtok": 1000, "output_per_mtok": 2000}}`)
	secrets := writeFile(t, "secrets.env", "OPENAI_API_KEY=sk-assembly-0123456789abcdef\n")
	host := []string{"--tools", "fixture:" + example("refund", "tools.json"), "--workspace", t.TempDir(), "--prices", prices, "--secrets", secrets}
	ctx := context.Background()

	e := newEnv(strings.NewReader(""), io.Discard, io.Discard)
	e.db = db
	o := &serveOptions{}
	if err := serveCmd(e, o).Flags().Parse(host); err != nil {
		t.Fatal(err)
	}
	serve, release, err := o.config(ctx, e.db, e.stderr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)

	// A command's host flags, as rein run and rein mcp (with --tasks) give
	// them.
	var h hostFlags
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	h.register(fs)
	if err := fs.Parse(host); err != nil {
		t.Fatal(err)
	}
	s, err := h.open(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	if s.tasks, err = catalog.NewHolder(""); err != nil {
		t.Fatal(err)
	}
	return serve, embeddedConfig(db, false, s)
}

// TestAssemblyFields: every field of assembly.Config is set by rein serve
// and by the embedded server alike, or listed with the reason one path
// (or neither) leaves it, so that a setting added to one path is not
// forgotten in the other.
func TestAssemblyFields(t *testing.T) {
	t.Parallel()
	serve, embedded := assemblyConfigs(t)
	for _, p := range assemblyFieldProblems(serve, embedded) {
		t.Error(p)
	}
	// The lists name fields that exist.
	var paths []string
	for _, f := range configFields(reflect.ValueOf(serve), reflect.ValueOf(embedded), "") {
		paths = append(paths, f.path)
	}
	for _, list := range []map[string]string{serveOnly, embeddedOnly, neitherPath} {
		for p, why := range list {
			if !slices.Contains(paths, p) {
				t.Errorf("%s is listed (%q) but assembly.Config has no such field", p, why)
			}
		}
	}
}

// TestAssemblyFieldsCatchOneSided: the check fails when one path drops a
// field the other sets, and when a field listed as one path's is set by
// the other.
func TestAssemblyFieldsCatchOneSided(t *testing.T) {
	t.Parallel()
	serve, embedded := assemblyConfigs(t)
	for _, tc := range []struct {
		name string
		drop func(serve, embedded *assembly.Config)
		want string
	}{
		{"embedded drops a shared field", func(_, e *assembly.Config) { e.Node.MaxRecvBytes = 0 },
			"Node.MaxRecvBytes is set by rein serve and not by the embedded server"},
		{"serve drops a shared field", func(s, _ *assembly.Config) { s.Node.Workspace = "" },
			"Node.Workspace is set by the embedded server and not by rein serve"},
		{"embedded sets a serve-only field", func(_, e *assembly.Config) { e.Node.Resume = true },
			"Node.Resume is listed as rein serve's alone"},
		{"a path sets a field listed as neither's", func(s, _ *assembly.Config) { s.Node.MaxDriven = 1 },
			"Node.MaxDriven is listed as set by neither path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, e := serve, embedded // copies: Node and Lifecycle are values
			tc.drop(&s, &e)
			problems := assemblyFieldProblems(s, e)
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.HasPrefix(p, tc.want) }) {
				t.Errorf("problems %q, want one starting %q", problems, tc.want)
			}
		})
	}
}
