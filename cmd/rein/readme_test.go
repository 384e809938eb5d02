package main

// TestDocsShellBlocks runs the shell blocks of the README and of every page
// under docs/, so that what they tell a user to type keeps working: every
// ```sh and ```bash block of a page, in order, except the ones docSkips names
// (each with its reason: a network, a key, a server that runs until
// stopped). The README's quick start builds the binary once, in its first
// block; every other block runs with bash in a temporary working directory
// holding that binary as ./rein and a copy of examples/, and must exit with
// the code its comment quotes ("exit code 10"), else 0. Each page runs as a
// subtest of its own, with its own /tmp and its own RUN_ID. The other tests
// here check what the pages name: files, links and their anchors, RPCs, the
// Go version.

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// docPage is one Markdown page of the repository's documentation.
type docPage struct {
	name     string // its path from the repository root, with slashes: "README.md", "docs/cli.md"
	text     string // the whole page
	prose    string // the page without its fenced code blocks
	blocks   []docBlock
	headings []string // the text of each heading, in order
}

// docBlock is one fenced code block of a page.
type docBlock struct {
	lang    string // the fence's language: sh, bash, json, …
	section string // the "## " heading it is under; "" before the first
	line    int    // the line of its opening fence, from 1
	text    string
}

// docSkips are the shell blocks the test does not run: each names the page
// and the section the block is in and a string only it holds, and says why.
var docSkips = []struct{ page, section, marker, why string }{
	{"README.md", "Quick start", "bash scripts/test.sh", "the whole test suite, which runs this test"},
	{"docs/cli.md", "Models", "OPENAI_API_KEY", "calls a model provider over the network, with an API key"},
	{"docs/cli.md", "Remote tool services and MCP servers", "go run ./examples/toolservice", "starts two servers that run until stopped, in three terminals"},
	{"docs/api.md", "grpcurl", "", "TestGrpcurlDocs runs this section's blocks against a real server"},
	{"docs/operating.md", "Running a server", "./rein serve", "starts a server that runs until stopped"},
	{"docs/operating.md", "Running several servers", ".bin/etcd", "starts an etcd cluster and servers that run until stopped; scripts/cluster-demo.sh does it, TestClusterDemo runs that"},
	{"docs/operating.md", "Web console", "--http 127.0.0.1:8080", "starts a server that runs until stopped, for a browser"},
	{"docs/operating.md", "Web console", "npm run build", "needs Node and the npm registry; scripts/test.sh runs it"},
	{"docs/operating.md", "Version, traces, logs and metrics", "./rein serve --otel", "starts a server that runs until stopped, exporting to a collector"},
	{"docs/operating.md", "Version, traces, logs and metrics", "curl -s 127.0.0.1:9090/metrics", "reads a server started with --admin-listen; TestServeAdminListen does"},
	{"docs/webhooks.md", "Subscribing", "./rein serve", "starts a server that runs until stopped"},
	{"docs/benchmarks.md", "The command", "./cmd/rein-bench", "builds rein-bench and rein from the repository root; scripts/test.sh builds them"},
	{"docs/upgrading.md", "Checking an upgrade before it ships", "staging.internal", "checks a staging server and a store file the reader has; TestUpgradeCheckOverServer and TestUpgradeCheckOnDB run the command"},
}

// readmeBuild is the README quick start's first block, which builds the
// binary every other block runs: the release build, without debug
// information (docs/architecture.md, "The binary's size").
const readmeBuild = "go build -trimpath -ldflags \"-s -w\" -o rein ./cmd/rein\n"

// readmeExitRe finds the exit code a block's comment quotes.
var readmeExitRe = regexp.MustCompile(`#.*\bexit(?: code)? (\d+)`)

// readmeRunIDRe finds a run ID a block printed, for the next blocks' RUN_ID.
var readmeRunIDRe = regexp.MustCompile(`"run_id": ?"(run_[0-9A-Z]+)"`)

// docHeadingRe finds a Markdown heading outside a code block.
var docHeadingRe = regexp.MustCompile(`^#{1,6} (.+)$`)

// readDocs returns the repository's root and its pages: README.md first,
// then every docs/*.md in name order.
func readDocs(t *testing.T) (root string, pages []docPage) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"README.md"}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(more) == 0 {
		t.Fatal("docs/ holds no .md page")
	}
	slices.Sort(more)
	for _, m := range more {
		names = append(names, "docs/"+filepath.Base(m))
	}
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, parseDoc(t, name, string(b)))
	}
	return root, pages
}

// readDoc returns the repository's root and the page name.
func readDoc(t *testing.T, name string) (root string, page docPage) {
	t.Helper()
	root, pages := readDocs(t)
	for _, p := range pages {
		if p.name == name {
			return root, p
		}
	}
	t.Fatalf("there is no page %s", name)
	return "", docPage{}
}

// parseDoc splits a page into its fenced code blocks, its headings and the
// prose around them.
func parseDoc(t *testing.T, name, text string) docPage {
	t.Helper()
	p := docPage{name: name, text: text}
	var prose strings.Builder
	section := ""
	var cur *docBlock
	for i, l := range strings.Split(text, "\n") {
		switch {
		case cur == nil && strings.HasPrefix(l, "```"):
			cur = &docBlock{lang: strings.TrimPrefix(l, "```"), section: section, line: i + 1}
		case cur != nil && l == "```":
			p.blocks = append(p.blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += l + "\n"
		default:
			prose.WriteString(l + "\n")
			if h, ok := strings.CutPrefix(l, "## "); ok {
				section = h
			}
			if m := docHeadingRe.FindStringSubmatch(l); m != nil {
				p.headings = append(p.headings, m[1])
			}
		}
	}
	if cur != nil {
		t.Fatalf("%s:%d: a code block is never closed", name, cur.line)
	}
	p.prose = prose.String()
	return p
}

// docSkip returns why block of page is not run, or "" to run it.
func docSkip(page string, b docBlock, used []bool) string {
	for i, s := range docSkips {
		if page == s.page && b.section == s.section && strings.Contains(b.text, s.marker) {
			used[i] = true
			return s.why
		}
	}
	return ""
}

// docShellBlock reports whether b is a shell block.
func docShellBlock(b docBlock) bool { return b.lang == "sh" || b.lang == "bash" }

func TestDocsShellBlocks(t *testing.T) {
	root, pages := readDocs(t)
	work := t.TempDir()
	if err := os.CopyFS(filepath.Join(work, "examples"), os.DirFS(filepath.Join(root, "examples"))); err != nil {
		t.Fatal(err)
	}
	used := make([]bool, len(docSkips))

	// The first block the test runs, the README's quick start's first,
	// builds the binary that every other block runs.
	readme := pages[0]
	first := -1
	for i, b := range readme.blocks {
		if docShellBlock(b) && docSkip(readme.name, b, used) == "" {
			first = i
			break
		}
	}
	if first < 0 {
		t.Fatalf("%s: no shell block to run", readme.name)
	}
	if b := readme.blocks[first]; b.text != readmeBuild {
		t.Fatalf("%s:%d: the first shell block should build the binary (%q), not:\n%s", readme.name, b.line, readmeBuild, b.text)
	}
	// -trimpath compiles every package anew the first time (its builds are
	// cached apart from the plain build's), hence the longer bound.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(work, "rein"), "./cmd/rein")
	build.Dir = root
	out, err := build.CombinedOutput()
	cancel()
	if err != nil {
		t.Fatalf("%s:%d: %s: %v\n%s", readme.name, readme.blocks[first].line, readmeBuild, err, out)
	}

	ran := map[string]int{}
	for _, p := range pages {
		t.Run(strings.ReplaceAll(p.name, "/", "_"), func(t *testing.T) {
			ran[p.name] = runDocBlocks(t, work, p, used)
		})
	}
	if ran[readme.name] == 0 {
		t.Errorf("%s: no shell block was run after the build", readme.name)
	}
	for i, u := range used {
		if !u {
			t.Errorf("docSkips[%d] (%s, %s, %q) matches no block: remove it", i, docSkips[i].page, docSkips[i].section, docSkips[i].marker)
		}
	}
}

// runDocBlocks runs the shell blocks of page in order, in work, and returns
// how many ran. The build block has run already.
func runDocBlocks(t *testing.T, work string, page docPage, used []bool) (ran int) {
	tmp := t.TempDir() // the blocks' /tmp
	runID := ""
	for _, b := range page.blocks {
		if !docShellBlock(b) {
			continue
		}
		if why := docSkip(page.name, b, used); why != "" {
			t.Logf("%s:%d (%s): not run: %s", page.name, b.line, b.section, why)
			continue
		}
		if b.text == readmeBuild {
			continue // TestDocsShellBlocks built it
		}
		want := 0
		if ms := readmeExitRe.FindAllStringSubmatch(b.text, -1); len(ms) == 1 {
			want, _ = strconv.Atoi(ms[0][1])
		} else if len(ms) > 1 {
			t.Fatalf("%s:%d: a block the test runs quotes %d exit codes; give each command its own block:\n%s", page.name, b.line, len(ms), b.text)
		}
		if strings.Contains(b.text, "$RUN_ID") && runID == "" {
			t.Fatalf("%s:%d: uses $RUN_ID before any block of the page printed a run_id:\n%s", page.name, b.line, b.text)
		}
		code, stdout, stderr := runReadmeBlock(t, work, strings.ReplaceAll(b.text, "/tmp/", tmp+"/"), runID)
		t.Logf("%s:%d (%s): exit %d", page.name, b.line, b.section, code)
		if code != want {
			t.Errorf("%s:%d (%s): exit %d, want %d\n%s\nstdout:\n%s\nstderr:\n%s", page.name, b.line, b.section, code, want, b.text, stdout, stderr)
		}
		if m := readmeRunIDRe.FindAllStringSubmatch(stdout, -1); m != nil {
			runID = m[len(m)-1][1]
		}
		ran++
	}
	return ran
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

// docAnchor is the anchor GitHub gives a heading: lower case, spaces turned
// into hyphens, and every other character but letters, digits, hyphens and
// underscores dropped ("Retries against `--server`" is
// "retries-against---server").
func docAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// docAnchors is the set of a page's anchors; a heading that repeats gets
// -1, -2, … as on GitHub.
func docAnchors(p docPage) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, h := range p.headings {
		a := docAnchor(h)
		if n := seen[a]; n > 0 {
			seen[a]++
			a += "-" + strconv.Itoa(n)
		} else {
			seen[a] = 1
		}
		anchors[a] = true
	}
	return anchors
}

// Every file of examples/ a code block names, every file a shell block
// passes, every relative link and every anchor a link names, is in the
// repository; every page of docs/ is linked from the README.
func TestDocsPathsExist(t *testing.T) {
	root, pages := readDocs(t)
	byName := map[string]docPage{}
	for _, p := range pages {
		byName[p.name] = p
	}
	pathRe := regexp.MustCompile(`examples/[\w./-]*[\w/]`)
	// A relative file a shell block passes (a task, a script, fixtures, a
	// tokens file), whatever its flag's prefix (fixture:, script:, NAME=).
	fileRe := regexp.MustCompile(`^(?:[\w-]+[:=])?([\w.-][\w./-]*\.(?:json|jsonl|proto))$`)
	// A link: its target, relative to the page, and its anchor.
	linkRe := regexp.MustCompile(`\]\(([^)#:\s]*)(#[^)\s]*)?\)`)
	linked := map[string]bool{}
	for _, page := range pages {
		// The commands run from the repository root.
		for _, b := range page.blocks {
			for _, p := range pathRe.FindAllString(b.text, -1) {
				if _, err := os.Stat(filepath.Join(root, p)); err != nil {
					t.Errorf("%s:%d names %s, which is not in the repository: %v", page.name, b.line, p, err)
				}
			}
		}
		for _, b := range page.blocks {
			if !docShellBlock(b) {
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
					t.Errorf("%s:%d passes %s, which is not in the repository: %v", page.name, b.line, p, err)
				}
			}
		}
		// Links are relative to the page's directory.
		for _, m := range linkRe.FindAllStringSubmatch(page.prose, -1) {
			target, anchor := m[1], strings.TrimPrefix(m[2], "#")
			if target == "" && anchor == "" {
				continue
			}
			name := page.name
			if target != "" {
				name = path.Clean(path.Join(path.Dir(page.name), target))
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(name))); err != nil {
					t.Errorf("%s links to %s, which is not in the repository: %v", page.name, target, err)
					continue
				}
				linked[name] = linked[name] || page.name == "README.md"
			}
			if anchor == "" {
				continue
			}
			to, ok := byName[name]
			if !ok {
				t.Errorf("%s links to %s#%s: an anchor into a file that is not one of the pages", page.name, target, anchor)
				continue
			}
			if !docAnchors(to)[anchor] {
				t.Errorf("%s links to %s#%s, but %s has no such heading (its anchors: %v)", page.name, target, anchor, to.name, slices.Sorted(maps.Keys(docAnchors(to))))
			}
		}
		// A reference to a design document the repository does not hold.
		if _, err := os.Stat(filepath.Join(root, "DESIGN.md")); err != nil {
			if loc := regexp.MustCompile(`DESIGN\b`).FindStringIndex(page.text); loc != nil {
				t.Errorf("%s refers to DESIGN (%q), a file the repository does not hold; its design is docs/design.md", page.name, page.text[loc[0]:min(len(page.text), loc[1]+4)])
			}
		}
	}
	for _, p := range pages[1:] {
		if !linked[p.name] {
			t.Errorf("README.md does not link to %s", p.name)
		}
	}
}

// docs/api.md's RunService table has a row for every RPC of RunService.
func TestDocsAPITableListsEveryRPC(t *testing.T) {
	_, api := readDoc(t, "docs/api.md")
	methods := reinv1.File_rein_v1_run_service_proto.Services().ByName("RunService").Methods()
	for i := range methods.Len() {
		name := string(methods.Get(i).Name())
		if !strings.Contains(api.text, "| `"+name+"(") {
			t.Errorf("%s's RPC table has no row for %s", api.name, name)
		}
	}
}

// The Go version the README asks for is go.mod's.
func TestReadmeGoVersion(t *testing.T) {
	root, readme := readDoc(t, "README.md")
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	if !strings.Contains(readme.text, "You need Go "+string(m[1])+" or newer") {
		t.Errorf("README.md does not say \"You need Go %s or newer\" (go.mod's go line)", m[1])
	}
}

// docAnchor gives GitHub's anchors, which the pages' links name.
func TestDocAnchor(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"Quick start", "quick-start"},
		{"Retries against `--server`", "retries-against---server"},
		{"A run's lifetime: archive, retention, erasure", "a-runs-lifetime-archive-retention-erasure"},
		{"3. One step, in a fixed order", "3-one-step-in-a-fixed-order"},
		{"Fixture tools (`--tools fixture:FILE`)", "fixture-tools---tools-fixturefile"},
	} {
		if got := docAnchor(tc.heading); got != tc.want {
			t.Errorf("docAnchor(%q) = %q, want %q", tc.heading, got, tc.want)
		}
	}
	// A heading that repeats gets a suffix; a heading inside a code block
	// is not one.
	p := parseDoc(t, "x.md", "# A\n\n## Notes\n\n```sh\n# not a heading\n```\n\n## Notes\n")
	got := slices.Sorted(maps.Keys(docAnchors(p)))
	if want := []string{"a", "notes", "notes-1"}; !slices.Equal(got, want) {
		t.Errorf("docAnchors = %v, want %v", got, want)
	}
}
