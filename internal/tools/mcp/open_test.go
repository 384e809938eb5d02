package mcp

import (
	"slices"
	"strings"
	"testing"
)

func TestSplitCommand(t *testing.T) {
	for _, tc := range []struct {
		line string
		want []string
		err  string // a part of the error; "" for none
	}{
		{line: "server", want: []string{"server"}},
		{line: "  npx -y  @scope/server\t--root /tmp ", want: []string{"npx", "-y", "@scope/server", "--root", "/tmp"}},
		{line: `"/opt/my tools/server" --name 'two words' x`, want: []string{"/opt/my tools/server", "--name", "two words", "x"}},
		{line: `a "it's" 'say "hi"'`, want: []string{"a", "it's", `say "hi"`}},
		{line: `pre"quoted part"post`, want: []string{"prequoted partpost"}},
		{line: `server ""`, want: []string{"server", ""}},
		{line: `server $HOME *.go`, want: []string{"server", "$HOME", "*.go"}},
		{line: "", err: "no command given"},
		{line: "   ", err: "no command given"},
		{line: `"" arg`, err: "no command given"},
		{line: `server "open`, err: `unclosed " quote`},
		{line: `server 'open`, err: `unclosed ' quote`},
	} {
		got, err := splitCommand(tc.line)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("splitCommand(%q) = %q, %v; want an error with %q", tc.line, got, err, tc.err)
		case tc.err == "" && (err != nil || !slices.Equal(got, tc.want)):
			t.Errorf("splitCommand(%q) = %q, %v; want %q", tc.line, got, err, tc.want)
		}
	}
}

// A target is a URL only when what precedes "://" is a scheme; a command
// line with a URL among its arguments stays a command.
func TestTargetKind(t *testing.T) {
	for _, tc := range []struct {
		target string
		url    bool
	}{
		{"http://127.0.0.1:8080/mcp", true},
		{"HTTPS://example.com/mcp", true},
		{"server --upstream=http://x/mcp", false},
		{"server", false},
	} {
		if got := isURL(tc.target); got != tc.url {
			t.Errorf("isURL(%q) = %v, want %v", tc.target, got, tc.url)
		}
	}
}
