package main

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/reinhq/rein/internal/slackapp"
	"github.com/reinhq/rein/server"
)

// slackFlags are rein serve's flags for Slack's action endpoint on the HTTP
// face (docs/chat-approvals.md).
type slackFlags struct {
	secretFile   string
	usersFile    string
	responseURLs []string
}

func (s *slackFlags) register(f *pflag.FlagSet) {
	f.StringVar(&s.secretFile, "slack-signing-secret-file", "", "with --http and --slack-users, take Slack's Approve and Deny clicks at "+slackapp.Path+": a file (mode 0600) holding the Slack app's signing secret, which every click must be signed with (see docs/chat-approvals.md)")
	f.StringVar(&s.usersFile, "slack-users", "", "with --slack-signing-secret-file, the Slack users file (JSON) mapping each Slack user (team_id, user_id) to a principal and tenant of --tokens, whose roles it decides with; SIGHUP reloads it, a bad file keeping the previous mapping")
	f.StringSliceVar(&s.responseURLs, "slack-response-url", slackapp.DefaultResponseURLs, "with --slack-signing-secret-file, the prefixes (scheme, host and path) a click's response_url may have: the only addresses rein posts a click's outcome to; repeatable or comma-separated")
}

// names are the flags, for the check that they come with --http.
func (s *slackFlags) names() []string {
	return []string{"slack-signing-secret-file", "slack-users", "slack-response-url"}
}

// check refuses one of --slack-signing-secret-file and --slack-users
// without the other, a response URL that is not https://HOST/…, and the
// endpoint on a server without --tokens, whose principals it maps to.
func (s *slackFlags) check(f *pflag.FlagSet, tokens bool) error {
	if s.secretFile == "" && s.usersFile == "" {
		if f.Changed("slack-response-url") {
			return usageError("--slack-response-url is for Slack's action endpoint: give --slack-signing-secret-file and --slack-users too")
		}
		return nil
	}
	if s.secretFile == "" || s.usersFile == "" {
		return usageError("Slack's action endpoint needs both --slack-signing-secret-file (to verify clicks) and --slack-users (to map who clicked to a principal)")
	}
	if !tokens {
		return usageError("--slack-users maps Slack users to principals of the tokens file: give --tokens too (without it every caller is the local admin)")
	}
	for _, u := range s.responseURLs {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "https" && p.Scheme != "http") || p.Host == "" || !strings.HasSuffix(p.Path, "/") {
			return usageError("--slack-response-url %q: give a prefix such as https://hooks.slack.com/ (scheme, host, and a path ending in /)", u)
		}
	}
	return nil
}

// mounts is Slack's action endpoint on node, and what stops it: its
// decisions in progress and the reload of the users file on SIGHUP.
func (s *slackFlags) mounts(node *server.Node, cfg server.Config, log *slog.Logger) (map[string]http.Handler, func(), error) {
	secret, err := readSecretFile(s.secretFile)
	if err != nil {
		return nil, nil, err
	}
	dir := cfg.Directory
	known := func(tenant, id string) bool { _, ok := dir.Principal(tenant, id); return ok }
	users, err := slackapp.LoadUsers(s.usersFile, known)
	if err != nil {
		return nil, nil, usageError("--slack-users: %v", err)
	}
	h, err := slackapp.New(slackapp.Options{
		SigningSecret: secret, Users: users, Principal: dir.Principal, Runs: node,
		ResponseURLs: s.responseURLs, MaxBodyBytes: int64(cfg.MaxRecvBytes), Logger: log,
	})
	if err != nil {
		return nil, nil, usageError("%v", err)
	}
	stopHangup := onHangup(context.Background(), func() {
		n, err := users.Reload()
		if err != nil {
			log.Error("Slack users not reloaded; keeping the previous mapping", "file", s.usersFile, "error", err)
			return
		}
		log.Info("Slack users reloaded", "file", s.usersFile, "users", n)
	})
	log.Info("serving Slack's action endpoint", "path", slackapp.Path, "users", users.Len(), "response_urls", s.responseURLs)
	return map[string]http.Handler{slackapp.Path: h}, func() { stopHangup(); h.Close() }, nil
}

// readSecretFile is the secret a file holds, without the line end an
// editor adds; the file must not be readable by others.
func readSecretFile(path string) ([]byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, usageError("--slack-signing-secret-file: %v", err)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		return nil, usageError("--slack-signing-secret-file %s is readable by others (mode %04o); run chmod 600 %s", path, perm, path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, usageError("--slack-signing-secret-file: %v", err)
	}
	secret := strings.TrimSpace(string(data))
	if secret == "" {
		return nil, usageError("--slack-signing-secret-file %s is empty: paste the app's Signing Secret (Basic Information, App Credentials) into it", path)
	}
	return []byte(secret), nil
}
