package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// configFile is the CLI's config file: named profiles, each a way to reach
// rein (a server, or an embedded store) and, for the embedded server, its
// tools. It is TOML; unknown keys are an error. Because a profile may hold a
// token, the file must not be readable by others (mode 0600), and rein
// writes it so.
type configFile struct {
	// Current is the profile used when none is named (rein config use);
	// empty: "default".
	Current  string              `toml:"current,omitempty"`
	Profiles map[string]*profile `toml:"profiles,omitempty"`
}

// profile is one [profiles.NAME] table. Paths are used as written (a
// relative one is relative to the current directory).
type profile struct {
	Server         string `toml:"server,omitempty"`
	DB             string `toml:"db,omitempty"`
	Token          string `toml:"token,omitempty"`
	TokenFile      string `toml:"token_file,omitempty"`
	TLSCA          string `toml:"tls_ca,omitempty"`
	TLSCert        string `toml:"tls_cert,omitempty"`
	TLSKey         string `toml:"tls_key,omitempty"`
	TLSSystemRoots bool   `toml:"tls_system_roots,omitempty"`
	InsecureToken  bool   `toml:"insecure_token,omitempty"`
	Output         string `toml:"output,omitempty"`
	// The embedded server's tool flags, as on the command line.
	Tools      string   `toml:"tools,omitempty"`
	Workspace  string   `toml:"workspace,omitempty"`
	ToolServer []string `toml:"tool_server,omitempty"`
	MCP        []string `toml:"mcp,omitempty"`
	Prices     string   `toml:"prices,omitempty"`
	Secrets    string   `toml:"secrets,omitempty"`
}

// defaultProfile is the profile that applies when none is named and the
// file names no current one.
const defaultProfile = "default"

// defaultConfigPath is $XDG_CONFIG_HOME/rein/config.toml, else
// ~/.config/rein/config.toml.
func defaultConfigPath() string {
	dir := os.Getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "rein", "config.toml")
}

// loadConfig reads the config file at path. A missing file is an empty
// config (exists false); one readable by others, or that is not valid TOML
// of this shape, is refused.
func loadConfig(path string) (cfg *configFile, exists bool, err error) {
	cfg = &configFile{}
	if path == "" {
		return cfg, false, nil
	}
	info, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return cfg, false, nil
	}
	if err != nil {
		return nil, false, usageError("config file: %v", err)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		return nil, true, usageError("config file %s is readable by others (mode %04o): it may hold tokens; run chmod 600 %s", path, perm, path)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, true, usageError("config file: %v", err)
	}
	dec := toml.NewDecoder(bytes.NewReader(raw)).DisallowUnknownFields()
	if err := dec.Decode(cfg); err != nil {
		return nil, true, usageError("%s", tomlError(path, err))
	}
	for name, p := range cfg.Profiles {
		if p == nil {
			cfg.Profiles[name] = &profile{}
			continue
		}
		if err := p.check(); err != nil {
			return nil, true, usageError("%s: profile %q: %v", path, name, err)
		}
	}
	return cfg, true, nil
}

// tomlError says where in the file a decode error is, as FILE:LINE:COLUMN.
func tomlError(path string, err error) string {
	var se *toml.StrictMissingError
	if errors.As(err, &se) && len(se.Errors) > 0 {
		row, col := se.Errors[0].Position()
		return fmt.Sprintf("%s:%d:%d: unknown key %q; the keys are %s", path, row, col, strings.Join(se.Errors[0].Key(), "."), profileKeyList())
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		row, col := de.Position()
		return fmt.Sprintf("%s:%d:%d: %s; fix the file (TOML) or pass another with --config", path, row, col, de.Error())
	}
	return fmt.Sprintf("%s: %v", path, err)
}

// check refuses a profile that mixes what cannot go together.
func (p *profile) check() error {
	if p.Server != "" && p.DB != "" {
		return errors.New("give server (a rein server) or db (an embedded one), not both")
	}
	if p.Token != "" && p.TokenFile != "" {
		return errors.New("give token or token_file, not both")
	}
	if p.Server != "" && (p.Tools != "" || p.Workspace != "" || len(p.ToolServer) > 0 || len(p.MCP) > 0 || p.Prices != "" || p.Secrets != "") {
		return errors.New("tools, workspace, tool_server, mcp, prices and secrets set up the embedded server; a profile with server uses the server's own")
	}
	if p.Output != "" && p.Output != "json" && p.Output != "table" {
		return fmt.Errorf("output %q: use json or table", p.Output)
	}
	return nil
}

// profileNames are the file's profiles, sorted.
func (c *configFile) profileNames() []string {
	names := make([]string, 0, len(c.Profiles))
	for n := range c.Profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// saveConfig writes cfg to path with mode 0600, whole or not at all: a
// temporary file beside it, synced, then renamed over it.
func saveConfig(path string, cfg *configFile) error {
	raw, err := toml.Marshal(cfg)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".config-*.toml")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after the rename, a no-op
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(raw); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// profileKeys are the keys a profile may hold, as `rein config set` takes
// them, with a setter each (nil values clear the key).
var profileKeys = map[string]func(p *profile, values []string) error{
	"server":           str(func(p *profile) *string { return &p.Server }),
	"db":               str(func(p *profile) *string { return &p.DB }),
	"token":            str(func(p *profile) *string { return &p.Token }),
	"token_file":       str(func(p *profile) *string { return &p.TokenFile }),
	"tls_ca":           str(func(p *profile) *string { return &p.TLSCA }),
	"tls_cert":         str(func(p *profile) *string { return &p.TLSCert }),
	"tls_key":          str(func(p *profile) *string { return &p.TLSKey }),
	"tls_system_roots": boolean(func(p *profile) *bool { return &p.TLSSystemRoots }),
	"insecure_token":   boolean(func(p *profile) *bool { return &p.InsecureToken }),
	"output":           str(func(p *profile) *string { return &p.Output }),
	"tools":            str(func(p *profile) *string { return &p.Tools }),
	"workspace":        str(func(p *profile) *string { return &p.Workspace }),
	"tool_server":      list(func(p *profile) *[]string { return &p.ToolServer }),
	"mcp":              list(func(p *profile) *[]string { return &p.MCP }),
	"prices":           str(func(p *profile) *string { return &p.Prices }),
	"secrets":          str(func(p *profile) *string { return &p.Secrets }),
}

func profileKeyList() string {
	keys := make([]string, 0, len(profileKeys))
	for k := range profileKeys {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := ""
	for i, k := range keys {
		if i > 0 {
			out += ", "
		}
		out += k
	}
	return out
}

func str(field func(*profile) *string) func(*profile, []string) error {
	return func(p *profile, values []string) error {
		if values == nil {
			*field(p) = ""
			return nil
		}
		if len(values) != 1 {
			return errors.New("takes one value")
		}
		*field(p) = values[0]
		return nil
	}
}

func boolean(field func(*profile) *bool) func(*profile, []string) error {
	return func(p *profile, values []string) error {
		if values == nil {
			*field(p) = false
			return nil
		}
		if len(values) != 1 || (values[0] != "true" && values[0] != "false") {
			return errors.New("takes true or false")
		}
		*field(p) = values[0] == "true"
		return nil
	}
}

// list replaces a repeatable setting with the values given (none clears it).
func list(field func(*profile) *[]string) func(*profile, []string) error {
	return func(p *profile, values []string) error {
		*field(p) = slices.Clone(values)
		if len(values) == 0 {
			*field(p) = nil
		}
		return nil
	}
}
