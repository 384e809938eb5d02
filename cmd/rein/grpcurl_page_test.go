package main

// Reading the "## grpcurl" section of docs/api.md: its constants, its ```sh
// blocks and the arguments of its serve block.

import (
	"strings"
	"testing"
)

// grpcurlPage is the page, from the repository root, that holds the
// "## grpcurl" section.
const grpcurlPage = "docs/api.md"

// grpcurlDocAddr is the address the page's commands use; the test
// replaces it with the address its server listens on.
const grpcurlDocAddr = "127.0.0.1:7233"

// grpcurlTokenHeader is the flag that sends the token, as the page writes it.
const grpcurlTokenHeader = `-H "authorization: Bearer $TOKEN"`

// grpcurlApproverHeader is the flag that sends the approver's token.
const grpcurlApproverHeader = `-H "authorization: Bearer $APPROVER_TOKEN"`

// grpcurlEnv is what the test sets in each block's environment, in place of
// what the reader exported by hand.
var grpcurlEnv = []string{"TOKEN", "APPROVER_TOKEN", "RUN_ID", "PROPOSAL_ID", "PROPOSAL_HASH"}

// grpcurlStep is one ```sh block of the page's grpcurl section.
type grpcurlStep struct {
	kind string // what the block does; see grpcurlKinds
	text string // the block, as written
}

// grpcurlKinds names each kind of block the walkthrough must hold, in the
// order it must hold them, with a marker that identifies it.
var grpcurlKinds = []struct{ kind, marker string }{
	{"serve", "rein serve"},
	{"token", "export TOKEN="},
	{"health", "grpc.health.v1.Health/Check"},
	{"list", " list"},
	{"describe", " describe rein.v1.RunService"},
	{"start", "rein.v1.RunService/StartRun"},
	{"get", "rein.v1.RunService/GetRun"},
	{"approve", "rein.v1.RunService/DecideApproval"},
	{"watch", "rein.v1.RunService/WatchRun"},
}

// grpcurlSteps returns the ```sh blocks of the page's "## grpcurl" section,
// each classified, and fails unless they are exactly the blocks of
// grpcurlKinds in that order.
func grpcurlSteps(t *testing.T, page string) []grpcurlStep {
	t.Helper()
	lines := strings.Split(page, "\n")
	start := -1
	for i, l := range lines {
		if l == "## grpcurl" {
			start = i
			break
		}
	}
	if start < 0 {
		t.Fatalf(`%s has no "## grpcurl" section`, grpcurlPage)
	}
	var blocks []string
	var cur []string
	in := false
	for _, l := range lines[start+1:] {
		if !in && strings.HasPrefix(l, "## ") {
			break
		}
		switch {
		case !in && l == "```sh":
			in, cur = true, nil
		case in && l == "```":
			in = false
			blocks = append(blocks, strings.Join(cur, "\n")+"\n")
		case in:
			cur = append(cur, l)
		}
	}
	if in {
		t.Fatalf("%s's grpcurl section has a ```sh block that is never closed", grpcurlPage)
	}
	if len(blocks) != len(grpcurlKinds) {
		t.Fatalf("%s's grpcurl section has %d ```sh blocks, want %d (%v):\n%s",
			grpcurlPage, len(blocks), len(grpcurlKinds), grpcurlKinds, strings.Join(blocks, "---\n"))
	}
	steps := make([]grpcurlStep, len(blocks))
	for i, b := range blocks {
		want := grpcurlKinds[i]
		if !strings.Contains(b, want.marker) {
			t.Fatalf("%s grpcurl ```sh block %d should be the %s step (containing %q):\n%s", grpcurlPage, i+1, want.kind, want.marker, b)
		}
		if want.kind != "serve" && want.kind != "token" && !strings.Contains(b, grpcurlDocAddr) {
			t.Fatalf("%s grpcurl ```sh block %d does not call %s:\n%s", grpcurlPage, i+1, grpcurlDocAddr, b)
		}
		steps[i] = grpcurlStep{kind: want.kind, text: b}
	}
	return steps
}

// grpcurlWords splits a shell command line into words: backslash-newline
// joins lines, single and double quotes group (their content is kept as
// written, unexpanded), and an unquoted # starts a comment.
func grpcurlWords(t *testing.T, cmd string) []string {
	t.Helper()
	cmd = strings.ReplaceAll(cmd, "\\\n", " ")
	var words []string
	var w strings.Builder
	inWord := false
	var quote rune
	for _, r := range cmd {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				w.WriteRune(r)
			}
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t' || r == '\n':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case r == '#' && !inWord:
			return words
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		t.Fatalf("unterminated quote in %q", cmd)
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}

// grpcurlServeArgs turns the page's serve block into the arguments of the
// built binary: it drops `./rein`, and sets --listen to a port the
// kernel picks and --db to db.
func grpcurlServeArgs(t *testing.T, block, db string) []string {
	t.Helper()
	words := grpcurlWords(t, block)
	prefix := []string{"./rein", "serve"}
	if len(words) < len(prefix) || strings.Join(words[:len(prefix)], " ") != strings.Join(prefix, " ") {
		t.Fatalf("%s's serve block should start with %q: %q", grpcurlPage, strings.Join(prefix, " "), words)
	}
	args := append([]string(nil), words[len(prefix)-1:]...)
	seen := map[string]bool{}
	for i := 1; i < len(args); i++ {
		seen[args[i]] = true
		switch args[i] {
		case "--listen", "--db":
			if i+1 >= len(args) {
				t.Fatalf("%s's serve block: %s has no value", grpcurlPage, args[i])
			}
			if args[i] == "--listen" {
				if args[i+1] != grpcurlDocAddr {
					t.Fatalf("%s's serve block listens on %s, but the commands call %s", grpcurlPage, args[i+1], grpcurlDocAddr)
				}
				args[i+1] = "127.0.0.1:0"
			} else {
				args[i+1] = db
			}
			i++
		}
	}
	for _, f := range []string{"--listen", "--db", "--tokens", "--tools"} {
		if !seen[f] {
			t.Fatalf("%s's serve block has no %s: %s", grpcurlPage, f, block)
		}
	}
	return args
}
