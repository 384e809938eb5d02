package main

// TestReadmeShellBlocks runs the README's shell blocks, so that what it tells
// a new user to type keeps working: every ```sh and ```bash block, in order,
// except the ones readmeSkips names (each with its reason: a network, a key,
// a server that runs until stopped). The quick start's build block builds the
// binary once; every other block runs with bash in a temporary working
// directory holding that binary as ./rein and a copy of examples/, and must
// exit with the code its comment quotes ("exit code 10"), else 0. The other
// tests here check what the README names: files, RPCs, the Go version.

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// readmeBlock is one fenced code block of README.md.
type readmeBlock struct {
	lang    string // the fence's language: sh, bash, json, …
	section string // the "## " heading it is under
	line    int    // the line of its opening fence, from 1
	text    string
}

// readmeSkips are the shell blocks the test does not run: each names the
// section the block is in and a string only it holds, and says why.
var readmeSkips = []struct{ section, marker, why string }{
	{"Tests", "bash scripts/test.sh", "the whole test suite, which runs this test"},
	{"Models", "OPENAI_API_KEY", "calls a model provider over the network, with an API key"},
	{"Remote tool services and MCP servers", "go run ./examples/toolservice", "starts two servers that run until stopped, in three terminals"},
	{"grpcurl", "", "TestGrpcurlReadme runs this section's blocks against a real server"},
	{"Running a server", "./rein serve", "starts a server that runs until stopped"},
	{"Running several servers", ".bin/etcd", "starts an etcd cluster and servers that run until stopped; scripts/cluster-demo.sh does it, TestClusterDemo runs that"},
	{"Web console", "--http 127.0.0.1:8080", "starts a server that runs until stopped, for a browser"},
	{"Web console", "npm run build", "needs Node and the npm registry; scripts/test.sh runs it"},
	{"Operating rein", "./rein serve --otel", "starts a server that runs until stopped, exporting to a collector"},
	{"Operating rein", "curl -s 127.0.0.1:9090/metrics", "reads a server started with --admin-listen; TestServeAdminListen does"},
}

// readmeBuild is the quick start's first block, which builds the binary
// every other block runs.
const readmeBuild = "go build -o rein ./cmd/rein\n"

// readmeExitRe finds the exit code a block's comment quotes.
var readmeExitRe = regexp.MustCompile(`#.*\bexit(?: code)? (\d+)`)

// readmeRunIDRe finds a run ID a block printed, for the next blocks' RUN_ID.
var readmeRunIDRe = regexp.MustCompile(`"run_id": ?"(run_[0-9A-Z]+)"`)

func readReadme(t *testing.T) (root string, blocks []readmeBlock) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := ""
	var cur *readmeBlock
	for i, l := range strings.Split(string(b), "\n") {
		switch {
		case cur == nil && strings.HasPrefix(l, "```"):
			cur = &readmeBlock{lang: strings.TrimPrefix(l, "```"), section: section, line: i + 1}
		case cur != nil && l == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += l + "\n"
		case strings.HasPrefix(l, "## "):
			section = strings.TrimPrefix(l, "## ")
		}
	}
	if cur != nil {
		t.Fatalf("README.md:%d: a code block is never closed", cur.line)
	}
	return root, blocks
}

// readmeSkip returns why block is not run, or "" to run it.
func readmeSkip(b readmeBlock, used []bool) string {
	for i, s := range readmeSkips {
		if b.section == s.section && strings.Contains(b.text, s.marker) {
			used[i] = true
			return s.why
		}
	}
	return ""
}

func TestReadmeShellBlocks(t *testing.T) {
	root, blocks := readReadme(t)
	work := t.TempDir()
	tmp := t.TempDir() // the blocks' /tmp
	if err := os.CopyFS(filepath.Join(work, "examples"), os.DirFS(filepath.Join(root, "examples"))); err != nil {
		t.Fatal(err)
	}
	used := make([]bool, len(readmeSkips))
	built, ran := false, 0
	runID := ""
	for _, b := range blocks {
		if b.lang != "sh" && b.lang != "bash" {
			continue
		}
		if why := readmeSkip(b, used); why != "" {
			t.Logf("README.md:%d (%s): not run: %s", b.line, b.section, why)
			continue
		}
		if !built {
			// The first block the test runs builds the binary the others run.
			if b.text != readmeBuild {
				t.Fatalf("README.md:%d: the first shell block should build the binary (%q), not:\n%s", b.line, readmeBuild, b.text)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(work, "rein"), "./cmd/rein")
			build.Dir = root
			out, err := build.CombinedOutput()
			cancel()
			if err != nil {
				t.Fatalf("README.md:%d: %s: %v\n%s", b.line, readmeBuild, err, out)
			}
			built = true
			continue
		}
		want := 0
		if ms := readmeExitRe.FindAllStringSubmatch(b.text, -1); len(ms) == 1 {
			want, _ = strconv.Atoi(ms[0][1])
		} else if len(ms) > 1 {
			t.Fatalf("README.md:%d: a block the test runs quotes %d exit codes; give each command its own block:\n%s", b.line, len(ms), b.text)
		}
		if strings.Contains(b.text, "$RUN_ID") && runID == "" {
			t.Fatalf("README.md:%d: uses $RUN_ID before any block printed a run_id:\n%s", b.line, b.text)
		}
		code, stdout, stderr := runReadmeBlock(t, work, strings.ReplaceAll(b.text, "/tmp/", tmp+"/"), runID)
		t.Logf("README.md:%d (%s): exit %d", b.line, b.section, code)
		if code != want {
			t.Errorf("README.md:%d (%s): exit %d, want %d\n%s\nstdout:\n%s\nstderr:\n%s", b.line, b.section, code, want, b.text, stdout, stderr)
		}
		if m := readmeRunIDRe.FindAllStringSubmatch(stdout, -1); m != nil {
			runID = m[len(m)-1][1]
		}
		ran++
	}
	if !built || ran == 0 {
		t.Fatalf("README.md: no shell block was run (built %v, ran %d)", built, ran)
	}
	for i, u := range used {
		if !u {
			t.Errorf("readmeSkips[%d] (%s, %q) matches no README block: remove it", i, readmeSkips[i].section, readmeSkips[i].marker)
		}
	}
}

// runReadmeBlock runs text with bash in dir, stopping at the first command
// that fails, with RUN_ID set and a state directory of its own.
func runReadmeBlock(t *testing.T, dir, text, runID string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", "set -euo pipefail\n"+text)
	cmd.Dir = dir
	cmd.WaitDelay = 2 * time.Second
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "RUN_ID" && !strings.HasPrefix(k, "REIN_") && k != "NO_COLOR" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "RUN_ID="+runID, "XDG_STATE_HOME="+t.TempDir())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("timed out after 20s:\n%s\nstdout:\n%s\nstderr:\n%s", text, out.String(), errb.String())
	}
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("run %q: %v", text, err)
		}
		code = ee.ExitCode()
	}
	return code, out.String(), errb.String()
}

// Every file of examples/ a code block names, every file a shell block
// passes, and every relative link, is in the repository.
func TestReadmePathsExist(t *testing.T) {
	root, blocks := readReadme(t)
	pathRe := regexp.MustCompile(`examples/[\w./-]*[\w/]`)
	for _, b := range blocks {
		for _, p := range pathRe.FindAllString(b.text, -1) {
			if _, err := os.Stat(filepath.Join(root, p)); err != nil {
				t.Errorf("README.md:%d names %s, which is not in the repository: %v", b.line, p, err)
			}
		}
	}
	// Every relative file a shell block passes (a task, a script, fixtures,
	// a tokens file), whatever its flag's prefix (fixture:, script:, NAME=).
	fileRe := regexp.MustCompile(`^(?:[\w-]+[:=])?([\w.-][\w./-]*\.(?:json|jsonl|proto))$`)
	for _, b := range blocks {
		if b.lang != "sh" && b.lang != "bash" {
			continue
		}
		words := strings.Fields(b.text)
		for i, w := range words {
			m := fileRe.FindStringSubmatch(strings.Trim(w, `"'`))
			if m == nil {
				continue
			}
			p := m[1]
			if i > 0 && words[i-1] == "-proto" {
				// grpcurl reads a -proto file from its -import-path.
				if ip := regexp.MustCompile(`-import-path (\S+)`).FindStringSubmatch(b.text); ip != nil {
					p = filepath.Join(ip[1], p)
				}
			}
			if _, err := os.Stat(filepath.Join(root, p)); err != nil {
				t.Errorf("README.md:%d passes %s, which is not in the repository: %v", b.line, p, err)
			}
		}
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`\]\(([^)#:]+)(#[^)]*)?\)`).FindAllStringSubmatch(string(readme), -1) {
		if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
			t.Errorf("README.md links to %s, which is not in the repository: %v", m[1], err)
		}
	}
	// A reference to a design document the repository does not hold.
	if _, err := os.Stat(filepath.Join(root, "DESIGN.md")); err != nil {
		if loc := regexp.MustCompile(`DESIGN\b`).FindIndex(readme); loc != nil {
			t.Errorf("README.md refers to DESIGN (%q), a file the repository does not hold", readme[loc[0]:min(len(readme), loc[1]+4)])
		}
	}
}

// The README's API table has a row for every RPC of RunService.
func TestReadmeAPITableListsEveryRPC(t *testing.T) {
	root, _ := readReadme(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	methods := reinv1.File_rein_v1_run_service_proto.Services().ByName("RunService").Methods()
	for i := range methods.Len() {
		name := string(methods.Get(i).Name())
		if !strings.Contains(string(readme), "| `"+name+"(") {
			t.Errorf("README.md's API table has no row for %s", name)
		}
	}
}

// The Go version the README asks for is go.mod's.
func TestReadmeGoVersion(t *testing.T) {
	root, _ := readReadme(t)
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "You need Go "+string(m[1])+" or newer") {
		t.Errorf("README.md does not say \"You need Go %s or newer\" (go.mod's go line)", m[1])
	}
}
