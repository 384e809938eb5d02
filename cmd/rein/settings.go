package main

import (
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// A global setting comes from, highest first: its flag, its REIN_*
// environment variable, the profile, the built-in default.
const (
	rankDefault = iota
	rankProfile
	rankEnv
	rankFlag
)

// global is one of the root's persistent flags and where else its value
// may come from.
type global struct {
	flag, env string
	// key is the profile's key; "" for a setting profiles do not hold.
	key string
	// fromProfile reads key from a profile ("" or false: not set).
	fromProfile func(*profile) string
}

// settingValue is a global setting once resolved, for `rein config`.
type settingValue struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Source string `json:"source"`
	rank   int
}

func strKey(get func(*profile) string) func(*profile) string { return get }

func boolKey(get func(*profile) bool) func(*profile) string {
	return func(p *profile) string {
		if get(p) {
			return "true"
		}
		return ""
	}
}

// globals are the root's persistent flags but --config and --profile,
// which choose the profile and are resolved first.
var globals = []global{
	{"db", "REIN_DB", "db", strKey(func(p *profile) string { return p.DB })},
	{"server", "REIN_SERVER", "server", strKey(func(p *profile) string { return p.Server })},
	{"token", "REIN_TOKEN", "token", strKey(func(p *profile) string { return p.Token })},
	{"token-file", "REIN_TOKEN_FILE", "token_file", strKey(func(p *profile) string { return p.TokenFile })},
	{"tls-ca", "REIN_TLS_CA", "tls_ca", strKey(func(p *profile) string { return p.TLSCA })},
	{"tls-cert", "REIN_TLS_CERT", "tls_cert", strKey(func(p *profile) string { return p.TLSCert })},
	{"tls-key", "REIN_TLS_KEY", "tls_key", strKey(func(p *profile) string { return p.TLSKey })},
	{"tls-system-roots", "REIN_TLS_SYSTEM_ROOTS", "tls_system_roots", boolKey(func(p *profile) bool { return p.TLSSystemRoots })},
	{"insecure-token", "REIN_INSECURE_TOKEN", "insecure_token", boolKey(func(p *profile) bool { return p.InsecureToken })},
	{"output", "REIN_OUTPUT", "output", strKey(func(p *profile) string { return p.Output })},
	{"json", "REIN_JSON", "", nil},
}

// registerGlobals adds the root's persistent flags.
func (e *env) registerGlobals(f *pflag.FlagSet) {
	f.StringVar(&e.configPath, "config", "", "the config file of profiles (env REIN_CONFIG; default $XDG_CONFIG_HOME/rein/config.toml, else ~/.config/rein/config.toml)")
	f.StringVar(&e.profileName, "profile", "", `the profile of the config file to use (env REIN_PROFILE; default the file's current one, else "default" if there is one)`)
	f.StringVar(&e.db, "db", defaultDB(), "bbolt file of the embedded server (env REIN_DB)")
	f.BoolVar(&e.json, "json", false, "print JSON, as --output json (env REIN_JSON)")
	f.StringVar(&e.output, "output", "table", "json or table (env REIN_OUTPUT)")
	f.StringVar(&e.server, "server", "", "a rein server's host:port (env REIN_SERVER); without it, commands run an embedded server on --db")
	f.StringVar(&e.token, "token", "", "bearer token for --server (env REIN_TOKEN)")
	f.StringVar(&e.tokenFile, "token-file", "", "a file holding the bearer token for --server, mode 0600 (env REIN_TOKEN_FILE)")
	f.StringVar(&e.tlsCA, "tls-ca", "", "CA certificate that signed the server's; turns TLS on (env REIN_TLS_CA)")
	f.StringVar(&e.tlsCert, "tls-cert", "", "client certificate, for mTLS (env REIN_TLS_CERT)")
	f.StringVar(&e.tlsKey, "tls-key", "", "client key, for mTLS (env REIN_TLS_KEY)")
	f.BoolVar(&e.tlsSystemRoots, "tls-system-roots", false, "TLS to --server, verified by the system's CA roots (env REIN_TLS_SYSTEM_ROOTS)")
	f.BoolVar(&e.insecureToken, "insecure-token", false, "send the token over plaintext to a host that is not loopback, on a network you trust (env REIN_INSECURE_TOKEN)")
}

// resolve fills the global settings from, highest first, the flags, the
// environment, the profile and the defaults, and the tool flags of cmd
// that the profile holds for the embedded server. withProfile false (rein
// config set, use, delete) reads the file but chooses no profile.
func (e *env) resolve(root, cmd *cobra.Command, withProfile bool) error {
	if e.resolved {
		return nil
	}
	flags := root.PersistentFlags()
	e.configSource = "default"
	switch {
	case flags.Changed("config"):
		e.configSource = "flag --config"
	case os.Getenv("REIN_CONFIG") != "":
		e.configPath, e.configSource = os.Getenv("REIN_CONFIG"), "env REIN_CONFIG"
	default:
		e.configPath = defaultConfigPath()
	}
	cfg, exists, err := loadConfig(e.configPath)
	if err != nil {
		return err
	}
	e.config, e.configExists = cfg, exists
	var p *profile
	if withProfile {
		if p, err = e.chooseProfile(flags.Changed("profile")); err != nil {
			return err
		}
	}
	e.settings = nil
	for _, g := range globals {
		f := flags.Lookup(g.flag)
		v := settingValue{Name: g.flag, Value: f.Value.String(), Source: "default"}
		switch {
		case f.Changed:
			v.Source, v.rank = "flag --"+g.flag, rankFlag
		case os.Getenv(g.env) != "":
			if err := f.Value.Set(os.Getenv(g.env)); err != nil {
				return usageError("%s=%q: %v", g.env, os.Getenv(g.env), err)
			}
			v.Value, v.Source, v.rank = f.Value.String(), "env "+g.env, rankEnv
		case p != nil && g.fromProfile != nil && g.fromProfile(p) != "":
			if err := f.Value.Set(g.fromProfile(p)); err != nil {
				return usageError("profile %q: %s: %v", e.profileName, g.key, err)
			}
			v.Value, v.Source, v.rank = f.Value.String(), "profile "+e.profileName, rankProfile
		}
		e.settings = append(e.settings, v)
	}
	if err := e.pick("token", "token-file", func() { e.tokenFile = "" }, func() { e.token = "" }); err != nil {
		return err
	}
	if e.output != "json" && e.output != "table" {
		return usageError("--output %q: use json or table", e.output)
	}
	json := e.setting("json")
	output := e.setting("output")
	switch {
	case json.rank == output.rank && json.rank > rankDefault && e.json != (e.output == "json"):
		return usageError("--json and --output %s disagree (both from %s); give one", e.output, strings.TrimPrefix(json.Source, "flag "))
	case json.rank > output.rank:
		// --json, or REIN_JSON, over a lower --output.
	default:
		e.json = e.output == "json"
	}
	if p != nil && e.server == "" && cmd.Name() != "serve" {
		if err := applyHostProfile(cmd.Flags(), p); err != nil {
			return err
		}
	}
	e.resolved = true
	return nil
}

// chooseProfile finds the profile to use: --profile, else REIN_PROFILE, else
// the file's current one, else "default" if the file has it (else none).
func (e *env) chooseProfile(flagged bool) (*profile, error) {
	source := ""
	switch {
	case flagged:
		source = "flag --profile"
	case os.Getenv("REIN_PROFILE") != "":
		e.profileName, source = os.Getenv("REIN_PROFILE"), "env REIN_PROFILE"
	case e.config.Current != "":
		e.profileName, source = e.config.Current, "current in "+e.configPath
	default:
		e.profileName = defaultProfile
		if e.config.Profiles[defaultProfile] == nil {
			e.profileName = ""
			return nil, nil
		}
		source = "default"
	}
	e.profileSource = source
	p := e.config.Profiles[e.profileName]
	if p == nil {
		names := e.config.profileNames()
		known := "it has none"
		if len(names) > 0 {
			known = "it has " + strings.Join(names, ", ")
		}
		where := e.configPath
		if !e.configExists {
			where += " (no such file)"
		}
		return nil, usageError("no profile %q (%s) in %s: %s; `rein config` lists them, `rein config set %s KEY VALUE` makes one", e.profileName, source, where, known, e.profileName)
	}
	return p, nil
}

// pick keeps whichever of two settings that say the same thing (--token
// and --token-file) comes from the higher source, clearing the other; both
// from the same source is an error.
func (e *env) pick(a, b string, dropB, dropA func()) error {
	va, vb := e.setting(a), e.setting(b)
	if va.Value == "" || vb.Value == "" {
		return nil
	}
	switch {
	case va.rank == vb.rank:
		return usageError("--%s and --%s both given (from %s); give one", a, b, strings.TrimPrefix(va.Source, "flag "))
	case va.rank > vb.rank:
		dropB()
	default:
		dropA()
	}
	return nil
}

// setting is the resolved setting of a global flag.
func (e *env) setting(flag string) settingValue {
	for _, v := range e.settings {
		if v.Name == flag {
			return v
		}
	}
	return settingValue{Name: flag}
}

// hostKeys map the embedded server's tool flags to the profile's keys.
var hostKeys = []struct {
	flag string
	get  func(*profile) []string
}{
	{"tools", func(p *profile) []string { return nonEmpty(p.Tools) }},
	{"workspace", func(p *profile) []string { return nonEmpty(p.Workspace) }},
	{"tool-server", func(p *profile) []string { return p.ToolServer }},
	{"mcp", func(p *profile) []string { return p.MCP }},
	{"prices", func(p *profile) []string { return nonEmpty(p.Prices) }},
	{"secrets", func(p *profile) []string { return nonEmpty(p.Secrets) }},
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// applyHostProfile sets the tool flags a command has and was not given
// from the profile, so that a run approved, answered or forked on the
// embedded server has the tools it was started with.
func applyHostProfile(f *pflag.FlagSet, p *profile) error {
	for _, k := range hostKeys {
		fl := f.Lookup(k.flag)
		if fl == nil || fl.Changed {
			continue
		}
		for _, v := range k.get(p) {
			if err := fl.Value.Set(v); err != nil {
				return usageError("profile: %s: %v", k.flag, err)
			}
		}
	}
	return nil
}

// maskToken shows enough of a token to tell two apart, never the token.
func maskToken(t string) string {
	if t == "" {
		return ""
	}
	if len(t) < 12 {
		return "****"
	}
	return "****" + t[len(t)-4:]
}

// describe is a setting as `rein config` shows it.
func (v settingValue) describe() settingValue {
	if v.Name == "token" {
		v.Value = maskToken(v.Value)
	}
	return v
}

// bearerToken is the token for --server: --token's, or the --token-file's
// content (a file others can read is refused).
func (t *target) bearerToken() (string, error) {
	if t.token != "" || t.tokenFile == "" {
		return t.token, nil
	}
	info, err := os.Stat(t.tokenFile)
	if err != nil {
		return "", usageError("--token-file: %v", err)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		return "", usageError("--token-file %s is readable by others (mode %04o); run chmod 600 %s", t.tokenFile, perm, t.tokenFile)
	}
	raw, err := os.ReadFile(t.tokenFile)
	if err != nil {
		return "", usageError("--token-file: %v", err)
	}
	tok := strings.TrimSpace(string(raw))
	if tok == "" {
		return "", usageError("--token-file %s is empty", t.tokenFile)
	}
	return tok, nil
}
