package a2a

import (
	"fmt"
	"net/url"
	"os"
	"strings"
)

// Source is a parsed tool source: the remote agent's URL and where its
// bearer token comes from.
type Source struct {
	// URL is the agent's base URL, where its card is served at
	// /.well-known/agent-card.json; it has no query.
	URL string
	// TokenEnv and TokenFile name where the bearer token is read: an
	// environment variable, a file (its content, trimmed). At most one.
	TokenEnv, TokenFile string
}

// ParseSource parses URL[?token_env=NAME|?token_file=FILE], the value of
// rein's --a2a NAME=…: an http or https URL whose query may name where the
// agent's bearer token is read, so that the token itself is never on a
// command line, in a flag's value or in a run's events.
func ParseSource(s string) (Source, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Source{}, fmt.Errorf("%q is not an http or https URL of an A2A agent", s)
	}
	q := u.Query()
	src := Source{TokenEnv: q.Get("token_env"), TokenFile: q.Get("token_file")}
	for k := range q {
		if k != "token_env" && k != "token_file" {
			return Source{}, fmt.Errorf("%q: unknown query parameter %q; the source takes token_env=NAME or token_file=FILE", s, k)
		}
	}
	if src.TokenEnv != "" && src.TokenFile != "" {
		return Source{}, fmt.Errorf("%q: give token_env or token_file, not both", s)
	}
	u.RawQuery, u.Fragment = "", ""
	src.URL = strings.TrimRight(u.String(), "/")
	return src, nil
}

// Token reads the bearer token the source names: "" when it names none.
func (s Source) Token() (string, error) {
	switch {
	case s.TokenEnv != "":
		v := strings.TrimSpace(os.Getenv(s.TokenEnv))
		if v == "" {
			return "", fmt.Errorf("token_env %s: the environment variable is unset or empty; export the agent's token in it", s.TokenEnv)
		}
		return v, nil
	case s.TokenFile != "":
		data, err := os.ReadFile(s.TokenFile)
		if err != nil {
			return "", fmt.Errorf("token_file: %w", err)
		}
		v := strings.TrimSpace(string(data))
		if v == "" {
			return "", fmt.Errorf("token_file %s is empty; write the agent's token in it", s.TokenFile)
		}
		return v, nil
	}
	return "", nil
}
