package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// isolateConfig points the CLI at a config file of its own (not yet
// written) and clears every REIN_* variable the settings read.
func isolateConfig(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	for _, g := range globals {
		t.Setenv(g.env, "")
	}
	t.Setenv("REIN_CONFIG", "")
	t.Setenv("REIN_PROFILE", "")
	return filepath.Join(dir, "rein", "config.toml")
}

func writeConfig(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// resolvedSettings runs `rein config --json` with args and returns each
// setting's value and source.
func resolvedSettings(t *testing.T, args ...string) (configView, map[string]settingValue) {
	t.Helper()
	r := cli(t, append([]string{"config", "--json"}, args...)...).mustExit(t, exitOK)
	var v configView
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("rein config --json: %v\n%s", err, r.stdout)
	}
	out := map[string]settingValue{}
	for _, s := range v.Settings {
		out[s.Name] = s
	}
	return v, out
}

const precedenceConfig = `
[profiles.remote]
server = "profile.example:7233"
token = "profile-token-0003"

[profiles.local]
db = "/profile/rein.db"

[profiles.bare]
`

// TestConfigPrecedence: a global setting comes from its flag, else its
// REIN_* variable, else the profile, else the default, for --server,
// --token and --db.
func TestConfigPrecedence(t *testing.T) {
	path := isolateConfig(t)
	writeConfig(t, path, precedenceConfig, 0o600)
	cases := []struct {
		setting, env, profileWith string
		masked                    func(string) string
	}{
		{"server", "REIN_SERVER", "remote", nil},
		{"token", "REIN_TOKEN", "remote", maskToken},
		{"db", "REIN_DB", "local", nil},
	}
	profileValue := map[string]string{"server": "profile.example:7233", "token": "profile-token-0003", "db": "/profile/rein.db"}
	for _, c := range cases {
		flagV, envV := "flag-"+c.setting+"-0001", "env-"+c.setting+"-0002"
		show := func(s string) string {
			if c.masked != nil {
				return c.masked(s)
			}
			return s
		}
		for _, l := range []struct {
			name, profile    string
			flag, env        bool
			want, wantSource string
		}{
			{"flag over env and profile", c.profileWith, true, true, show(flagV), "flag --" + c.setting},
			{"env over profile", c.profileWith, false, true, show(envV), "env " + c.env},
			{"profile", c.profileWith, false, false, show(profileValue[c.setting]), "profile " + c.profileWith},
			{"default", "bare", false, false, "", "default"},
		} {
			t.Run(c.setting+"/"+l.name, func(t *testing.T) {
				args := []string{"--profile", l.profile}
				if l.flag {
					args = append(args, "--"+c.setting, flagV)
				}
				t.Setenv(c.env, "")
				if l.env {
					t.Setenv(c.env, envV)
				}
				_, got := resolvedSettings(t, args...)
				s := got[c.setting]
				want := l.want
				if c.setting == "db" && l.wantSource == "default" {
					want = defaultDB()
				}
				if s.Value != want || s.Source != l.wantSource {
					t.Fatalf("%s = %q from %q, want %q from %q", c.setting, s.Value, s.Source, want, l.wantSource)
				}
			})
		}
	}
	// No token is ever shown whole.
	r := cli(t, "config", "--profile", "remote").mustExit(t, exitOK)
	if strings.Contains(r.stdout, "profile-token-0003") {
		t.Fatalf("rein config showed the token:\n%s", r.stdout)
	}
	mustContain(t, "rein config", r.stdout, "****0003", "* remote", "profile: remote (flag --profile)")
}

// TestProfileChoosesTheStore: the profile's db is the store commands use,
// and REIN_DB is above it.
func TestProfileChoosesTheStore(t *testing.T) {
	path := isolateConfig(t)
	db, other := newDB(t), newDB(t)
	writeConfig(t, path, fmt.Sprintf("[profiles.default]\ndb = %q\n", db), 0o600)
	runID := decodeOne(t, cli(t, append(exampleRun("invoice", db), "--json")...).mustExit(t, exitOK).stdout)["run_id"].(string)
	// The default profile applies with none named.
	mustContain(t, "list on the profile's db", cli(t, "list").mustExit(t, exitOK).stdout, runID)
	t.Setenv("REIN_DB", other)
	if out := cli(t, "list", "--json").mustExit(t, exitOK).stdout; strings.Contains(out, runID) {
		t.Fatalf("REIN_DB did not win over the profile: %s", out)
	}
}

// TestConfigRefusals: an unknown profile named anywhere, a file others can
// read, malformed TOML (with line and column), an unknown key, a profile
// that mixes server and db: each refused with exit 2 and what to do.
func TestConfigRefusals(t *testing.T) {
	path := isolateConfig(t)
	// No file, no profile named: the defaults.
	cli(t, "config").mustExit(t, exitOK)
	r := cli(t, "list", "--profile", "prod").mustExit(t, exitUsage)
	mustContain(t, "unknown profile, no file", r.stderr, `no profile "prod"`, "no such file", "rein config set prod")

	writeConfig(t, path, precedenceConfig, 0o600)
	cli(t, "config", "--profile", "remote").mustExit(t, exitOK)
	r = cli(t, "list", "--profile", "prod").mustExit(t, exitUsage)
	mustContain(t, "unknown profile", r.stderr, `no profile "prod" (flag --profile)`, "bare, local, remote")
	t.Setenv("REIN_PROFILE", "staging")
	mustContain(t, "unknown REIN_PROFILE", cli(t, "list").mustExit(t, exitUsage).stderr, `no profile "staging" (env REIN_PROFILE)`)
	t.Setenv("REIN_PROFILE", "")
	writeConfig(t, path, "current = \"gone\"\n"+precedenceConfig, 0o600)
	mustContain(t, "unknown current", cli(t, "list").mustExit(t, exitUsage).stderr, `no profile "gone" (current in `)

	writeConfig(t, path, precedenceConfig, 0o644)
	r = cli(t, "list").mustExit(t, exitUsage)
	mustContain(t, "readable by others", r.stderr, "readable by others (mode 0644)", "chmod 600 "+path)

	for _, c := range []struct{ content, want string }{
		{"[profiles.x]\nserver = \"a\"\nthis is not toml\n", path + ":3:"},
		{"[profiles.x]\nserverr = \"a\"\n", path + `:2:1: unknown key "profiles.x.serverr"`},
		{"[profiles.x]\nserver = \"a\"\ndb = \"b\"\n", `profile "x": give server`},
	} {
		writeConfig(t, path, c.content, 0o600)
		r = cli(t, "list").mustExit(t, exitUsage)
		mustContain(t, "config "+c.content, r.stderr, c.want)
	}
	writeConfig(t, path, precedenceConfig, 0o600)
	if r := cli(t, "--profile", "remote", "--token", "a", "--token-file", "b", "config").mustExit(t, exitUsage); !strings.Contains(r.stderr, "--token and --token-file") {
		t.Fatalf("--token with --token-file: %s", r.stderr)
	}
	if !regexp.MustCompile(`:3:\d+: `).MatchString(cli(t, "--config", writeFileMode(t, "c.toml", "[p]\nx = 1\n= 2\n", 0o600), "list").stderr) {
		t.Fatal("a TOML syntax error has no line and column")
	}
}

func writeFileMode(t *testing.T, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	writeConfig(t, p, content, mode)
	return p
}

func fileMode(t *testing.T, path string) os.FileMode {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Mode().Perm()
}

// TestConfigSetUseDelete: set makes the file (mode 0600) and the profile,
// use makes it current, delete removes a key or the profile; a refused
// edit leaves the file's bytes as they were.
func TestConfigSetUseDelete(t *testing.T) {
	path := isolateConfig(t)
	db := newDB(t)
	cli(t, "config", "set", "lab", "db", db).mustExit(t, exitOK)
	cli(t, "config", "set", "lab", "mcp", "a=http://x", "b=http://y").mustExit(t, exitOK)
	cli(t, "config", "set", "prod", "server", "rein.example:7233").mustExit(t, exitOK)
	if m := fileMode(t, path); m != 0o600 {
		t.Fatalf("config file mode %04o, want 0600", m)
	}
	cli(t, "config", "use", "lab").mustExit(t, exitOK)
	v, got := resolvedSettings(t)
	if v.Current != "lab" || v.Profile != "lab" || got["db"].Value != db || got["db"].Source != "profile lab" {
		t.Fatalf("after use lab: current %q, profile %q, db %+v", v.Current, v.Profile, got["db"])
	}
	if got["mcp"].Value != "a=http://x, b=http://y" {
		t.Fatalf("mcp %+v", got["mcp"])
	}
	cli(t, "config", "delete", "lab", "mcp").mustExit(t, exitOK)
	if _, got = resolvedSettings(t); got["mcp"].Value != "" {
		t.Fatalf("mcp after delete: %+v", got["mcp"])
	}

	// Refused edits change no byte.
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"config", "set", "lab", "colour", "blue"},
		{"config", "set", "lab", "server", "x:1"}, // lab has db
		{"config", "set", "lab", "output", "yaml"},
		{"config", "set", "bad name", "db", "x"},
		{"config", "use", "staging"},
		{"config", "delete", "staging"},
	} {
		r := cli(t, args...)
		if r.code == exitOK {
			t.Fatalf("%v: exit 0", args)
		}
		if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
			t.Fatalf("%v (refused, exit %d) changed the file:\n%s", args, r.code, after)
		}
	}
	// A malformed file is never overwritten.
	writeConfig(t, path, "[profiles\n", 0o600)
	cli(t, "config", "set", "lab", "db", db).mustExit(t, exitUsage)
	if after, _ := os.ReadFile(path); string(after) != "[profiles\n" {
		t.Fatalf("set over a malformed file rewrote it: %q", after)
	}

	writeConfig(t, path, string(before), 0o600)
	cli(t, "config", "delete", "lab").mustExit(t, exitOK)
	v, _ = resolvedSettings(t)
	if v.Current != "" || strings.Join(v.Profiles, ",") != "prod" {
		t.Fatalf("after delete lab: current %q, profiles %v", v.Current, v.Profiles)
	}
	if m := fileMode(t, path); m != 0o600 {
		t.Fatalf("config file mode %04o after delete, want 0600", m)
	}
}

// TestProfileToolsCarryApprove: with the tool flags in the profile, a run
// started and approved on the embedded server has its tools, nothing typed
// twice; the twin without them cannot commit and records nothing.
func TestProfileToolsCarryApprove(t *testing.T) {
	path := isolateConfig(t)
	db := newDB(t)
	writeConfig(t, path, fmt.Sprintf("[profiles.default]\ndb = %q\ntools = %q\n[profiles.bare]\ndb = %q\n", db, "fixture:"+example("refund", "tools.json"), db), 0o600)
	out := decodeOne(t, cli(t, "run", example("refund", "task.json"), "--model", "script:"+example("refund", "model.jsonl"), "--json").mustExit(t, exitPaused).stdout)
	runID := out["run_id"].(string)
	prop := obj(t, obj(t, out["pending"], "pending")["proposal"], "proposal")["proposal_id"].(string)

	before := len(events(t, db, runID))
	r := cli(t, "approve", runID, prop, "--profile", "bare")
	if r.code == exitOK || !strings.Contains(r.stderr, "no tool to carry this out") {
		t.Fatalf("approve without the tools: exit %d, %s", r.code, r.stderr)
	}
	if after := len(events(t, db, runID)); after != before {
		t.Fatalf("a refused approve wrote %d events", after-before)
	}
	if got := decodeOne(t, cli(t, "approve", runID, prop, "--json").mustExit(t, exitOK).stdout); got["status"] != "completed" {
		t.Fatalf("approve with the profile's tools: %v", got["status"])
	}
}

// nonLoopbackIP is one of this machine's addresses that is not loopback,
// or "".
func nonLoopbackIP() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}

// TestPlaintextTokenRefused: a token is not sent in plaintext to a host
// that is not loopback, whether it came from a flag, the environment or a
// profile, and the refusal comes before any dial (the address does not
// answer). The twin: --insecure-token sends it, and the server takes it.
func TestPlaintextTokenRefused(t *testing.T) {
	path := isolateConfig(t)
	const far = "10.255.255.1:7233"
	writeConfig(t, path, fmt.Sprintf("[profiles.far]\nserver = %q\ntoken = \"profile-token-0003\"\n", far), 0o600)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for name, args := range map[string][]string{
		"flag":    {"list", "--server", far, "--token", "t0k3n"},
		"profile": {"list", "--profile", "far"},
	} {
		var out, errb bytes.Buffer
		code := Run(ctx, args, strings.NewReader(""), &out, &errb)
		if code != exitUsage {
			t.Fatalf("%s: exit %d, want 2:\n%s", name, code, errb.String())
		}
		mustContain(t, name, errb.String(), "refusing to send the bearer token in plaintext to "+far, "use TLS", "--insecure-token")
	}
	t.Setenv("REIN_TOKEN", "t0k3n")
	mustContain(t, "env", cli(t, "inspect", "run_x", "--server", far).mustExit(t, exitUsage).stderr, "refusing to send the bearer token")
	t.Setenv("REIN_TOKEN", "")

	ip := nonLoopbackIP()
	if ip == "" {
		t.Skip("no non-loopback address to serve on")
	}
	token := "lab-token-0001"
	sum := sha256.Sum256([]byte(token))
	tokens := writeFile(t, "tokens.json", fmt.Sprintf(`{"principals": [{"id": "ops", "tenant": "lab", "roles": ["viewer"], "token_sha256": %q}]}`, hex.EncodeToString(sum[:])))
	addr, _ := serveLogging(t, "--listen", ip+":0", "--tokens", tokens, "--log-format", "json")
	cli(t, "list", "--server", addr, "--token", token).mustExit(t, exitUsage)
	cli(t, "list", "--server", addr, "--token", token, "--insecure-token").mustExit(t, exitOK)
	// The token was needed: without it the server refuses.
	cli(t, "list", "--server", addr).mustExit(t, exitDenied)
}
