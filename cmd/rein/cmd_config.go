package main

import (
	"fmt"
	"regexp"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func newConfigCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Show the config file's profiles and the settings in force, with where each comes from",
		Long: `Show the config file of profiles, its profiles (* marks the one in use), and
every global setting as this command line resolves it, with its source: a flag,
a REIN_* environment variable, the profile, or the built-in default. Tokens are
masked.

A setting comes from, highest first: its flag, its environment variable, the
profile, the default. The profile is --profile, else REIN_PROFILE, else the
file's current one (rein config use), else "default" if the file has one.`,
		Example: `  rein config
  rein config --profile prod --json
  REIN_SERVER=localhost:7233 rein config`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return showConfig(e) },
	}
	cmd.AddCommand(newConfigSetCmd(e), newConfigUseCmd(e), newConfigDeleteCmd(e))
	return cmd
}

// configView is `rein config --json`.
type configView struct {
	File          string         `json:"file"`
	FileSource    string         `json:"file_source"`
	Exists        bool           `json:"exists"`
	Current       string         `json:"current,omitempty"`
	Profiles      []string       `json:"profiles"`
	Profile       string         `json:"profile,omitempty"`
	ProfileSource string         `json:"profile_source,omitempty"`
	Settings      []settingValue `json:"settings"`
}

func showConfig(e *env) error {
	v := configView{File: e.configPath, FileSource: e.configSource, Exists: e.configExists,
		Current: e.config.Current, Profiles: e.config.profileNames(), Profile: e.profileName, ProfileSource: e.profileSource}
	for _, s := range e.settings {
		v.Settings = append(v.Settings, s.describe())
	}
	if p := e.config.Profiles[e.profileName]; p != nil && e.server == "" {
		for _, k := range hostKeys {
			if vals := k.get(p); len(vals) > 0 {
				v.Settings = append(v.Settings, settingValue{Name: k.flag, Value: strings.Join(vals, ", "), Source: "profile " + e.profileName})
			}
		}
	}
	if e.json {
		return writeJSON(e.stdout, v, true)
	}
	file := v.File
	if !v.Exists {
		file += " (no such file yet: rein config set makes it)"
	}
	fmt.Fprintf(e.stdout, "config file: %s (%s)\n", file, v.FileSource)
	fmt.Fprintln(e.stdout, "profiles:")
	if len(v.Profiles) == 0 {
		fmt.Fprintln(e.stdout, "  (none)")
	}
	for _, n := range v.Profiles {
		mark := " "
		if n == v.Profile {
			mark = "*"
		}
		fmt.Fprintf(e.stdout, "%s %s\n", mark, n)
	}
	if v.Profile != "" {
		fmt.Fprintf(e.stdout, "profile: %s (%s)\n", v.Profile, v.ProfileSource)
	} else {
		fmt.Fprintln(e.stdout, "profile: none")
	}
	w := tabwriter.NewWriter(e.stdout, 0, 2, 2, ' ', 0)
	fmt.Fprintln(w, "SETTING\tVALUE\tSOURCE")
	for _, s := range v.Settings {
		fmt.Fprintf(w, "%s\t%s\t%s\n", s.Name, s.Value, s.Source)
	}
	return w.Flush()
}

// profileName is what a profile may be called.
var profileNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

func checkProfileName(name string) error {
	if !profileNameRE.MatchString(name) {
		return usageError("profile name %q: use letters, digits, '_', '.' and '-' (at most 64), starting with a letter or digit", name)
	}
	return nil
}

// editConfig is the shape of set, use and delete: the file is read (and
// refused if malformed: it is never overwritten then), changed by edit,
// checked, and written whole with mode 0600.
func editConfig(e *env, edit func(*configFile) (string, error)) error {
	cfg := e.config
	if cfg.Profiles == nil {
		cfg.Profiles = map[string]*profile{}
	}
	what, err := edit(cfg)
	if err != nil {
		return err
	}
	if err := saveConfig(e.configPath, cfg); err != nil {
		return fmt.Errorf("write %s: %w (the file is unchanged)", e.configPath, err)
	}
	fmt.Fprintf(e.stderr, "rein: %s in %s\n", what, e.configPath)
	return nil
}

func newConfigSetCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "set PROFILE KEY [VALUE...]",
		Short: "Set a key of a profile (making the profile, and the file, if need be)",
		Long: `Set KEY of PROFILE to VALUE in the config file, making both if need be. The file
is rewritten whole with mode 0600 (comments are not kept).

The keys: server, db, token, token_file, tls_ca, tls_cert, tls_key,
tls_system_roots (true|false), insecure_token (true|false), output (json|table),
and the embedded server's tools: tools, workspace, tool_server and mcp (give
several values; they replace the list), prices, secrets.`,
		Example: `  rein config set prod server rein.example.com:7233
  rein config set prod token_file ~/.config/rein/prod.token
  rein config set prod tls_system_roots true
  rein config set default workspace ./repo
  rein config set default mcp fs=https://mcp.internal/fs git=https://mcp.internal/git`,
		Annotations: map[string]string{annotationNoProfile: "1"},
		Args:        cobra.MinimumNArgs(3),
		RunE: func(_ *cobra.Command, args []string) error {
			name, key, values := args[0], args[1], args[2:]
			if err := checkProfileName(name); err != nil {
				return err
			}
			setter, ok := profileKeys[key]
			if !ok {
				return usageError("unknown key %q; the keys are %s", key, profileKeyList())
			}
			return editConfig(e, func(cfg *configFile) (string, error) {
				p := cfg.Profiles[name]
				if p == nil {
					p = &profile{}
				}
				changed := *p
				if err := setter(&changed, values); err != nil {
					return "", usageError("%s: %v", key, err)
				}
				if err := changed.check(); err != nil {
					return "", usageError("profile %q: %v", name, err)
				}
				cfg.Profiles[name] = &changed
				return fmt.Sprintf("set %s of profile %s", key, name), nil
			})
		},
	}
}

func newConfigUseCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:         "use PROFILE",
		Short:       "Make a profile the one used when none is named",
		Example:     `  rein config use prod`,
		Annotations: map[string]string{annotationNoProfile: "1"},
		Args:        cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return editConfig(e, func(cfg *configFile) (string, error) {
				if cfg.Profiles[args[0]] == nil {
					return "", &exitErr{code: exitNotFound, err: fmt.Errorf("no profile %q in %s; make it with rein config set %s KEY VALUE", args[0], e.configPath, args[0])}
				}
				cfg.Current = args[0]
				return "now using profile " + args[0], nil
			})
		},
	}
}

func newConfigDeleteCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "delete PROFILE [KEY]",
		Short: "Delete a profile, or one key of it",
		Example: `  rein config delete lab
  rein config delete prod token`,
		Annotations: map[string]string{annotationNoProfile: "1"},
		Args:        cobra.RangeArgs(1, 2),
		RunE: func(_ *cobra.Command, args []string) error {
			name := args[0]
			return editConfig(e, func(cfg *configFile) (string, error) {
				p := cfg.Profiles[name]
				if p == nil {
					return "", &exitErr{code: exitNotFound, err: fmt.Errorf("no profile %q in %s; rein config lists them", name, e.configPath)}
				}
				if len(args) == 2 {
					setter, ok := profileKeys[args[1]]
					if !ok {
						return "", usageError("unknown key %q; the keys are %s", args[1], profileKeyList())
					}
					_ = setter(p, nil)
					return fmt.Sprintf("deleted %s of profile %s", args[1], name), nil
				}
				delete(cfg.Profiles, name)
				if cfg.Current == name {
					cfg.Current = ""
				}
				return "deleted profile " + name, nil
			})
		},
	}
}
