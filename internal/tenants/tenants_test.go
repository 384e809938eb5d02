package tenants

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const good = `# rein serve --tenants
[defaults]
archive_after = "24h"
retain = "720h"

[tenants.acme]
archive_after = "1h"
retain = "168h"

[tenants.beta]
archive_after = "0s" # at once

[tenants."gamma.io"]
`

func dur(d time.Duration) *time.Duration { return &d }

// writeTenants writes content into a new mode-0600 file.
func writeTenants(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tenants.toml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParse(t *testing.T) {
	s, err := Parse("tenants.toml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Tenants(), []string{"acme", "beta", "gamma.io"}; !slices.Equal(got, want) {
		t.Errorf("Tenants() = %q, want %q", got, want)
	}
	acme, ok := s.Tenant("acme")
	if !ok || *acme.Lifecycle.ArchiveAfter != time.Hour || *acme.Lifecycle.Retain != 168*time.Hour {
		t.Errorf("acme = %+v (%v), want archive_after 1h, retain 168h", acme, ok)
	}
	beta, _ := s.Tenant("beta")
	if beta.Lifecycle.ArchiveAfter == nil || *beta.Lifecycle.ArchiveAfter != 0 || beta.Lifecycle.Retain != nil {
		t.Errorf("beta = %+v, want archive_after set to 0 and retain not set", beta.Lifecycle)
	}
	if d := s.Defaults().Lifecycle; *d.ArchiveAfter != 24*time.Hour || *d.Retain != 720*time.Hour {
		t.Errorf("defaults = %+v, want 24h and 720h", d)
	}
	if _, ok := s.Tenant("nobody"); ok {
		t.Error("Tenant(nobody) found a table the file does not have")
	}
}

// TestResolve: a key comes from the tenant's table, else [defaults], else
// the base (the server's flags); one set nowhere is off.
func TestResolve(t *testing.T) {
	base := Lifecycle{ArchiveAfter: dur(48 * time.Hour), Retain: dur(8760 * time.Hour)}
	type want struct {
		archive, retain     time.Duration
		archiveOn, retainOn bool
	}
	cases := []struct {
		name, file, tenant string
		base               Lifecycle
		want               want
	}{
		{"tenant's table first", good, "acme", base, want{time.Hour, 168 * time.Hour, true, true}},
		{"a set 0 is at once, not unset", good, "beta", base, want{0, 720 * time.Hour, true, true}},
		{"an empty table is all defaults", good, "gamma.io", base, want{24 * time.Hour, 720 * time.Hour, true, true}},
		{"no table is all defaults", good, "nobody", base, want{24 * time.Hour, 720 * time.Hour, true, true}},
		{"no defaults: the base", "[tenants.acme]\nretain = \"1h\"\n", "acme", base, want{48 * time.Hour, time.Hour, true, true}},
		{"set nowhere: off", "[tenants.acme]\nretain = \"1h\"\n", "acme", Lifecycle{}, want{0, time.Hour, false, true}},
		{"empty file: the base", "", "acme", base, want{48 * time.Hour, 8760 * time.Hour, true, true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := Parse("tenants.toml", []byte(c.file))
			if err != nil {
				t.Fatal(err)
			}
			a, r, aOn, rOn := s.withBase(c.base).Lifecycle(c.tenant)
			if got := (want{a, r, aOn, rOn}); got != c.want {
				t.Errorf("Lifecycle(%q) = %+v, want %+v", c.tenant, got, c.want)
			}
			l := s.Resolve(c.tenant, c.base)
			if on := l.ArchiveAfter != nil; on != c.want.archiveOn || on && *l.ArchiveAfter != c.want.archive {
				t.Errorf("Resolve(%q).ArchiveAfter = %v, want %v (set %v)", c.tenant, l.ArchiveAfter, c.want.archive, c.want.archiveOn)
			}
		})
	}
	// The twin: Settings from Parse carry no base, and no file resolves
	// to the base alone.
	s, _ := Parse("tenants.toml", []byte("[tenants.acme]\nretain = \"1h\"\n"))
	if _, _, aOn, _ := s.Lifecycle("acme"); aOn {
		t.Error("Parse's settings resolved archive_after from a base they were not given")
	}
	var none *Settings
	if l := none.Resolve("acme", base); l != base {
		t.Errorf("nil Settings resolved to %+v, want the base", l)
	}
}

// TestParseRefused: every refused file names the file, the line and what
// is wrong.
func TestParseRefused(t *testing.T) {
	cases := []struct {
		name, file string
		line       int
		want       []string
	}{
		{"unknown key in a tenant", "[defaults]\nretain = \"1h\"\n\n[tenants.beta]\n\n[tenants.acme]\narchive_aftr = \"1h\"\n", 7,
			[]string{`tenants.toml:7: unknown key "archive_aftr" in [tenants.acme]; the keys are archive_after, retain`}},
		{"unknown key in defaults", "[defaults]\nretian = \"1h\"\n", 2,
			[]string{`unknown key "retian" in [defaults]; the keys are archive_after, retain`}},
		{"unknown key, dotted", "[tenants]\nacme.retian = \"1h\"\n", 2,
			[]string{`unknown key "retian" in [tenants.acme]`}},
		{"unknown key in an inline table", "[tenants]\nacme = { retian = \"1h\" }\n", 2,
			[]string{`unknown key "retian" in a [tenants.NAME] table`}},
		{"unknown table", "\n[default]\nretain = \"1h\"\n", 2,
			[]string{`unknown key "default"; the file holds a [defaults] table and [tenants.NAME] tables`}},
		{"unknown top-level key", "retain = \"1h\"\n", 1,
			[]string{`unknown key "retain"; the file holds`}},
		{"table nested in a tenant's", "[tenants.acme.limits]\nx = 1\n", 1,
			[]string{`unknown key "limits" in [tenants.acme]`}},
		{"bad duration", "[tenants.acme]\nretain = \"1h\"\narchive_after = \"soon\"\n", 3,
			[]string{`archive_after in [tenants.acme]: "soon" is not a duration`, `"90m"`}},
		{"negative", "[defaults]\nretain = \"-1h\"\n", 2,
			[]string{`retain in [defaults]: "-1h" is negative; give 0s (at once) or more`}},
		{"a number, not a string", "[tenants.acme]\narchive_after = 3600\n", 2,
			[]string{`archive_after in [tenants.acme] is a TOML integer; want a duration, a string such as "90m"`}},
		{"the earliest problem first", "[tenants.b]\nretain = \"x\"\n[tenants.a]\nretain = \"-1s\"\n[defaults]\nretain = \"y\"\n", 2,
			[]string{`retain in [tenants.b]: "x"`}},
		{"empty tenant name", "[tenants.acme]\n\n[tenants.\"\"]\nretain = \"1h\"\n", 3,
			[]string{`a tenant's name is empty`}},
		{"syntax error", "[defaults]\nretain = \"1h\"\n[tenants.acme\nretain = \"1h\"\n", 3,
			[]string{`tenants.toml:3:`, `expected ']'`}},
		{"duplicate key", "[tenants.acme]\nretain = \"1h\"\nretain = \"2h\"\n", 3,
			[]string{`already defined`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := Parse("tenants.toml", []byte(c.file))
			if err == nil {
				t.Fatalf("parsed, want refused: %+v", s)
			}
			var fe *Error
			if !errors.As(err, &fe) {
				t.Fatalf("error %T %v, want an *Error", err, err)
			}
			if fe.File != "tenants.toml" || fe.Line != c.line {
				t.Errorf("error at %s:%d, want tenants.toml:%d: %v", fe.File, fe.Line, c.line, err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestLoad(t *testing.T) {
	s, err := Load(writeTenants(t, good))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Tenants()) != 3 || !strings.HasSuffix(s.Name(), "tenants.toml") {
		t.Errorf("Load: tenants %q, name %q", s.Tenants(), s.Name())
	}
	// A file of exactly the cap is read.
	exact := writeTenants(t, "#"+strings.Repeat("x", MaxFileBytes-2)+"\n")
	if _, err := Load(exact); err != nil {
		t.Errorf("a file of %d bytes: %v, want read", MaxFileBytes, err)
	}
}

// TestLoadRefused: what Load will not read is refused at once, saying why.
func TestLoadRefused(t *testing.T) {
	t.Run("readable by others", func(t *testing.T) {
		p := writeTenants(t, good)
		for _, mode := range []os.FileMode{0o644, 0o640, 0o604} {
			if err := os.Chmod(p, mode); err != nil {
				t.Fatal(err)
			}
			_, err := Load(p)
			if err == nil || !strings.Contains(err.Error(), "readable by others") || !strings.Contains(err.Error(), "chmod 600 "+p) {
				t.Errorf("mode %04o: %v, want refused naming chmod 600", mode, err)
			}
		}
		if err := os.Chmod(p, 0o400); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(p); err != nil {
			t.Errorf("mode 0400: %v, want read", err)
		}
	})
	t.Run("oversized", func(t *testing.T) {
		p := writeTenants(t, "#"+strings.Repeat("x", MaxFileBytes)+"\n")
		if _, err := Load(p); err == nil || !strings.Contains(err.Error(), "larger than") {
			t.Errorf("a file over 1 MiB: %v, want refused", err)
		}
	})
	t.Run("directory", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "a directory") {
			t.Errorf("a directory: %v, want refused", err)
		}
	})
	t.Run("missing", func(t *testing.T) {
		if _, err := Load(filepath.Join(t.TempDir(), "none.toml")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a missing file: %v, want ErrNotExist", err)
		}
	})
	t.Run("bad content names the path", func(t *testing.T) {
		p := writeTenants(t, "[tenants.acme]\nretian = \"1h\"\n")
		if _, err := Load(p); err == nil || !strings.HasPrefix(err.Error(), p+":2: ") {
			t.Errorf("Load: %v, want %s:2: …", err, p)
		}
	})
}

// TestHolderReload: a good file replaces the settings in force; a bad one
// leaves them, and says why.
func TestHolderReload(t *testing.T) {
	base := Lifecycle{Retain: dur(9 * time.Hour)}
	p := writeTenants(t, "[tenants.acme]\narchive_after = \"1h\"\n")
	h, err := NewHolder(p, base)
	if err != nil {
		t.Fatal(err)
	}
	check := func(when string, archive time.Duration, tenants ...string) {
		t.Helper()
		a, r, aOn, rOn := h.Lifecycle("acme")
		if a != archive || !aOn || r != 9*time.Hour || !rOn {
			t.Errorf("%s: acme = %v %v %v %v, want archive_after %v and the base's retain 9h", when, a, r, aOn, rOn, archive)
		}
		if got := h.Current().Tenants(); !slices.Equal(got, tenants) {
			t.Errorf("%s: tenants %q, want %q", when, got, tenants)
		}
	}
	check("at load", time.Hour, "acme")

	if err := os.WriteFile(p, []byte("[tenants.acme]\narchive_after = \"2h\"\n[tenants.beta]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := h.Reload()
	if err != nil || s != h.Current() {
		t.Fatalf("Reload of a good file: %v (returned the settings in force: %v)", err, s == h.Current())
	}
	check("after a good reload", 2*time.Hour, "acme", "beta")

	if err := os.WriteFile(p, []byte("[tenants.acme]\narchive_after = \"2h\"\n[tenants.beta\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := h.Current()
	var fe *Error
	if _, err := h.Reload(); !errors.As(err, &fe) || fe.Line != 3 {
		t.Errorf("Reload of a broken file: %v, want an *Error at line 3", err)
	}
	if h.Current() != before {
		t.Error("a refused reload replaced the settings in force")
	}
	check("after a refused reload", 2*time.Hour, "acme", "beta")

	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Reload(); err == nil {
		t.Error("Reload of a file readable by others: nil error, want refused")
	}
	check("after a refused reload (mode)", 2*time.Hour, "acme", "beta")
}

// TestHolderNoFile: without a file every tenant resolves to the base; the
// twin: a holder whose file is refused is not made.
func TestHolderNoFile(t *testing.T) {
	h, err := NewHolder("", Lifecycle{ArchiveAfter: dur(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if a, _, aOn, rOn := h.Lifecycle("acme"); a != time.Minute || !aOn || rOn {
		t.Errorf("no file: %v %v %v, want the base's 1m and retain off", a, aOn, rOn)
	}
	if _, err := h.Reload(); err != nil {
		t.Errorf("Reload with no file: %v", err)
	}
	if _, err := NewHolder(writeTenants(t, "[defaults]\nretain = 5\n"), Lifecycle{}); err == nil {
		t.Error("NewHolder of a bad file: nil error")
	}
}

// TestAdmissionKeys: max_running and weight resolve from a tenant's table,
// else [defaults], else no limit and weight 1; out-of-range values and
// wrong types are refused with their line.
func TestAdmissionKeys(t *testing.T) {
	s, err := Parse("t.toml", []byte("[defaults]\nmax_running = 8\n\n[tenants.acme]\nmax_running = 4\nweight = 2.5\n\n[tenants.beta]\n"))
	if err != nil {
		t.Fatal(err)
	}
	for tenant, want := range map[string]struct {
		max    int
		weight float64
	}{"acme": {4, 2.5}, "beta": {8, 1}, "other": {8, 1}} {
		if m, w := s.AdmissionOf(tenant); m != want.max || w != want.weight {
			t.Errorf("%s: max_running %d, weight %v; want %d, %v", tenant, m, w, want.max, want.weight)
		}
	}
	if !s.Limited() {
		t.Error("a file with max_running is not Limited")
	}
	var none *Settings
	if m, w := none.AdmissionOf("acme"); m != 0 || w != 1 || none.Limited() {
		t.Errorf("no file: max_running %d, weight %v, limited %v; want no limit", m, w, none.Limited())
	}
	for _, tc := range []struct{ body, want string }{
		{"[tenants.acme]\nmax_running = -1\n", "t.toml:2: max_running in [tenants.acme]: -1 is out of range"},
		{"[tenants.acme]\nweight = 0\n", "t.toml:2: weight in [tenants.acme]: 0 is out of range"},
		{"[defaults]\nmax_running = \"4\"\n", "t.toml:2: max_running in [defaults] is a TOML string; want an integer"},
	} {
		if _, err := Parse("t.toml", []byte(tc.body)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.body, err, tc.want)
		}
	}
}

// TestRateKeys: requests_per_minute and tokens_per_minute resolve from a
// tenant's table, else [defaults], else 0 (no limit); a negative one is
// refused with its line.
func TestRateKeys(t *testing.T) {
	s, err := Parse("t.toml", []byte("[defaults]\ntokens_per_minute = 90000\n\n[tenants.acme]\nrequests_per_minute = 60\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r, k := s.RatesOf("acme"); r != 60 || k != 90000 {
		t.Errorf("acme: %v requests, %v tokens; want 60 and 90000", r, k)
	}
	if r, k := s.RatesOf("beta"); r != 0 || k != 90000 {
		t.Errorf("beta: %v requests, %v tokens; want 0 and 90000", r, k)
	}
	if _, err := Parse("t.toml", []byte("[tenants.acme]\nrequests_per_minute = -5\n")); err == nil || !strings.Contains(err.Error(), "t.toml:2: requests_per_minute in [tenants.acme]: -5 is out of range") {
		t.Errorf("a negative rate: %v", err)
	}
}

// TestSoonest: the least age at which any tenant's lifecycle acts, over
// the tenants' tables, [defaults] and the base; none when nothing is set
// anywhere (the twin), and the base alone with no file.
func TestSoonest(t *testing.T) {
	cases := []struct {
		name, file string
		base       Lifecycle
		want       time.Duration
		ok         bool
	}{
		{"a tenant's table", good, Lifecycle{}, 0, true}, // beta archives at once
		{"defaults over the base", "[defaults]\nretain = \"2h\"\n", Lifecycle{ArchiveAfter: dur(48 * time.Hour)}, 2 * time.Hour, true},
		{"one tenant's retain", "[tenants.acme]\nretain = \"90m\"\n[tenants.globex]\nmax_running = 3\n", Lifecycle{}, 90 * time.Minute, true},
		{"nothing set", "[tenants.acme]\nmax_running = 3\n", Lifecycle{}, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := Parse("tenants.toml", []byte(c.file))
			if err != nil {
				t.Fatal(err)
			}
			if got, ok := s.Soonest(c.base); got != c.want || ok != c.ok {
				t.Fatalf("Soonest = %v, %v; want %v, %v", got, ok, c.want, c.ok)
			}
		})
	}
	var none *Settings
	if got, ok := none.Soonest(Lifecycle{Retain: dur(time.Hour)}); got != time.Hour || !ok {
		t.Fatalf("no file: Soonest = %v, %v; want the base's 1h", got, ok)
	}
}
