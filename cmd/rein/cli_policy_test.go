//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServePolicyRefused: a --policy file that cannot be used, or a bad
// --policy-fail, stops rein serve before anything opens, with exit 2 and
// the reason on stderr. The twin (a good file serves) is
// TestServePolicyReload.
func TestServePolicyRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	open := filepath.Join(dir, "open.toml")
	if err := os.WriteFile(open, []byte("[[rules]]\nname = \"a\"\neffect = \"deny\"\nwhen = \"true\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.toml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	good := writeFile(t, "policy.toml", "[[rules]]\nname = \"a\"\neffect = \"deny\"\nwhen = \"true\"\n")
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"does not compile", []string{"--policy", writeFile(t, "policy.toml", "\n[[rules]]\nname = \"no-shell\"\neffect = \"deny\"\nwhen = \"run.nope\"\n")},
			[]string{"--policy: ", "policy.toml:2: ", `rule 1 ("no-shell")`, "undefined field 'nope'"}},
		{"unknown key", []string{"--policy", writeFile(t, "policy.toml", "[[rules]]\nname = \"a\"\neffect = \"deny\"\nwhen = \"true\"\nwhy = \"x\"\n")}, []string{"policy.toml:5: ", `unknown key "rules.why"`}},
		{"readable by others", []string{"--policy", open}, []string{"readable by others (mode 0644)"}},
		{"a FIFO", []string{"--policy", fifo}, []string{"named pipe (FIFO)"}},
		{"fail open", []string{"--policy", good, "--policy-fail", "allow"}, []string{`--policy-fail "allow"`, "never allows"}},
		{"bad service", []string{"--policy-service", "finance"}, []string{`--policy-service "finance": give NAME=HOST:PORT`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := newDB(t)
			done := make(chan result, 1)
			go func() {
				done <- cli(t, append([]string{"serve", "--listen", "127.0.0.1:0", "--db", db}, c.args...)...)
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(60 * time.Second):
				t.Fatal("rein serve did not return")
			}
			r.mustExit(t, exitUsage)
			mustContain(t, "stderr", r.stderr, c.want...)
			mustNotExist(t, db)
		})
	}
}

// TestServePolicyReload: rein serve logs how many rules its --policy file
// holds; on SIGHUP with a file that does not compile it logs why, keeps
// the previous rules and keeps serving; on SIGHUP with a good file it logs
// the new rules.
func TestServePolicyReload(t *testing.T) {
	t.Setenv(cliEnv, "1") // the server is this test binary running the CLI
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	rule := func(name string) string {
		return "[[rules]]\nname = \"" + name + "\"\neffect = \"deny\"\nwhen = \"true\"\n"
	}
	file := writeFile(t, "policy.toml", rule("one"))
	srv := startGrpcurlServer(t, t.TempDir(), exe, []string{"serve", "--listen", "127.0.0.1:0", "--db", newDB(t), "--policy", file})
	mustContain(t, "the server's log", srv.output(), `msg="policy rules loaded" file=`+file+` rules=1`)
	rewrite := func(content string) { srv.rewriteAndHangUp(t, file, content) }
	waitLog := func(what string, want ...string) { srv.waitLog(t, what, want...) }
	rewrite(rule("one") + rule("two") + "[[rules]]\nname = \"three\"\neffect = \"deny\"\nwhen = \"args.\"\n")
	waitLog("the refused reload", "policy rules not reloaded; keeping the previous rules")
	mustServe(t, srv)
	if strings.Contains(srv.output(), "policy rules reloaded") {
		t.Errorf("a broken file was logged as reloaded:\n%s", srv.output())
	}
	rewrite(rule("one") + rule("two"))
	waitLog("the reload", `msg="policy rules reloaded" file=`+file+` rules=2`)
	mustServe(t, srv)
	srv.stop(t)
}
