package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"slices"
	"strings"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/model"
	"github.com/reinhq/rein/internal/model/anthropic"
	"github.com/reinhq/rein/internal/model/openai"
	"github.com/reinhq/rein/internal/secret"
)

// models builds a run's model with keys from the environment only, at any
// base URL (the embedded server's user is its operator).
func models(spec *reinv1.ModelSpec) (model.Model, error) { return modelsWith(nil, nil)(spec) }

// modelsWith builds a run's model: "openai" and "anthropic" with their API
// key from secrets (a --secrets file), else the server's environment; never
// from the contract. A contract's base_url gets the server's key only if
// allowed says so (nil allows any): otherwise anyone who may start a run
// could send it to a host of their choosing. Anything else goes through
// model.New.
func modelsWith(secrets map[string]string, allowed []string) func(*reinv1.ModelSpec) (model.Model, error) {
	key := func(name string) string {
		if v, ok := secrets[name]; ok {
			return v
		}
		return os.Getenv(name)
	}
	return func(spec *reinv1.ModelSpec) (model.Model, error) {
		if u := strings.TrimRight(spec.GetBaseUrl(), "/"); u != "" && allowed != nil && !slices.Contains(allowed, u) && !ownURL(spec.GetProvider(), u) {
			return nil, fmt.Errorf("model.base_url %q is not a URL this server sends its API keys to; its operator can allow it with rein serve --allow-base-url %s", spec.GetBaseUrl(), spec.GetBaseUrl())
		}
		switch spec.GetProvider() {
		case openai.Provider:
			return openai.New(spec, key(openai.KeyEnv))
		case anthropic.Provider:
			return anthropic.New(spec, key(anthropic.KeyEnv))
		}
		return model.New(spec)
	}
}

// serverSecrets is the redactor of every secret a server holds: each value
// of its --secrets file (file, nil without one), and each model provider's
// key in its environment, which modelsWith sends when the file has none
// and which a completion check may be let read. Both are redacted when the
// file and the environment give one name two values.
func serverSecrets(file map[string]string) *secret.Redactor {
	env := map[string]string{}
	for _, name := range []string{openai.KeyEnv, anthropic.KeyEnv} {
		env[name] = os.Getenv(name)
	}
	return secret.New(file, env)
}

// loadSecrets reads a secrets file: KEY=VALUE lines, blank lines and #
// comments skipped. The file must not be readable by others (mode 0600 or
// stricter): it holds API keys. Values are never printed.
func loadSecrets(path string) (map[string]string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("%s is readable by others (mode %04o): it holds API keys; run chmod 600 %s", path, perm, path)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(strings.TrimPrefix(k, "export "))
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			return nil, fmt.Errorf("%s line %d: expected KEY=VALUE (the value is not shown)", path, n)
		}
		out[k] = strings.Trim(strings.TrimSpace(v), `"'`)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// ownURL says whether u is the provider's own API, which its key is for.
func ownURL(provider, u string) bool {
	switch provider {
	case openai.Provider:
		return u == strings.TrimRight(openai.DefaultBaseURL, "/")
	case anthropic.Provider:
		return u == strings.TrimRight(anthropic.DefaultBaseURL, "/") || u == anthropic.DefaultBaseURL+"/v1"
	}
	return false
}
