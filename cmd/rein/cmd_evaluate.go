package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/reinhq/rein/client"
	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/evaluate"
	"github.com/reinhq/rein/internal/pricing"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/tools"
	"github.com/reinhq/rein/internal/tools/workspace"
)

type evaluateOptions struct {
	trials      int
	concurrency int
	minPassRate float64
	prices      string
}

func newEvaluateCmd(e *env) *cobra.Command {
	o := &evaluateOptions{}
	cmd := &cobra.Command{
		Use: "evaluate SUITE.json",
		Example: `  rein evaluate examples/eval/suite.json
  rein evaluate examples/eval/suite.json --json`,
		Short: "Run a suite of cases several times each and grade them; exit 1 under a pass rate",
		Long: `Run every case of a suite file --trials times (up to --concurrency at once) and
grade each trial against the case's expectations: the status the run pauses or
ends in, its final answer's text and data, the tools it called and did not call,
and, for a case with a workspace, the files and checks of the workspace the run
leaves. A paused run is graded as its status: no person answers in an
evaluation.

Every case runs on its own embedded server over a temporary database that is
removed afterwards; --db and --server are not used. A case with a workspace
runs each trial on a server of its own over a fresh copy of the workspace (the
file tools and completion checks work there), removed once graded.

Prints per case and overall the pass rate, median tokens, median cost in US
dollars (rein's default prices, or --prices over them), p95 wall time and
refused tool attempts, as a table or, with --json, one JSON object. Exits 1
when the overall pass rate is under --min-pass-rate (default 1, or the suite's
min_pass_rate), 2 for a malformed suite or price file.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.trials < 1 {
				return usageError("--trials %d: at least 1", o.trials)
			}
			if o.concurrency < 1 {
				return usageError("--concurrency %d: at least 1", o.concurrency)
			}
			if o.minPassRate < 0 || o.minPassRate > 1 {
				return usageError("--min-pass-rate %v: between 0 and 1", o.minPassRate)
			}
			if cmd.Flags().Changed("server") {
				return usageError("evaluate runs its trials on its own embedded server; --server does not apply")
			}
			prices := pricing.Default()
			if o.prices != "" {
				var err error
				if prices, err = pricing.Load(o.prices); err != nil {
					return usageError("--prices: %v", err)
				}
			}
			suite, cases, err := loadSuite(args[0])
			if err != nil {
				return err
			}
			threshold := 1.0
			if suite.MinPassRate != nil {
				threshold = *suite.MinPassRate
			}
			if cmd.Flags().Changed("min-pass-rate") {
				threshold = o.minPassRate
			}
			return o.run(cmd.Context(), e, args[0], cases, threshold, prices)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.trials, "trials", 1, "runs of each case")
	f.IntVar(&o.concurrency, "concurrency", 1, "trials of a case run at once")
	f.Float64Var(&o.minPassRate, "min-pass-rate", 1, "overall pass rate under which the evaluation fails (exit 1); overrides the suite's min_pass_rate")
	f.StringVar(&o.prices, "prices", "", "a price file (JSON: \"provider/model\" → input_per_mtok, output_per_mtok) over the default prices")
	return cmd
}

// evalCase is a suite's case, its files loaded.
type evalCase struct {
	name     string
	contract *reinv1.TaskContract
	executor tools.Executor
	// workspace, when set, is the directory each trial runs on a copy of.
	workspace string
	expect    evaluate.Expect
}

// loadSuite reads a suite file and every file its cases name (relative to
// the suite's directory). Every error is a usage error naming the file and
// the field.
func loadSuite(path string) (*evaluate.Suite, []evalCase, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, usageError("read suite file: %v", err)
	}
	suite, err := evaluate.ParseSuite(data)
	if err != nil {
		return nil, nil, usageError("%s: %v", path, err)
	}
	dir := filepath.Dir(path)
	rel := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	cases := make([]evalCase, 0, len(suite.Cases))
	for i, sc := range suite.Cases {
		wrap := func(field string, err error) error {
			var ee *exitErr
			if errors.As(err, &ee) && ee.err != nil {
				err = ee.err
			}
			return usageError("%s: cases[%d].%s (case %q): %v", path, i, field, sc.Name, err)
		}
		taskPath := rel(sc.Task)
		c, err := loadTask(taskPath)
		if err != nil {
			return nil, nil, wrap("task", err)
		}
		if sc.Model != "" {
			file, err := flagFile("model", sc.Model, "script")
			if err != nil {
				return nil, nil, wrap("model", err)
			}
			replies, err := loadScript(rel(file))
			if err != nil {
				return nil, nil, wrap("model", err)
			}
			c.Model = scriptSpec(replies)
		}
		if err := validateTask(taskPath, c); err != nil {
			return nil, nil, wrap("task", err)
		}
		ec := evalCase{name: sc.Name, contract: c, expect: sc.Expect}
		if sc.Workspace != "" {
			ec.workspace = rel(sc.Workspace)
			if err := evaluate.CheckWorkspace(ec.workspace); err != nil {
				return nil, nil, wrap("workspace", err)
			}
		} else if len(c.GetChecks()) > 0 {
			return nil, nil, wrap("task", fmt.Errorf("%s: the task has completion checks, which run in a workspace: give the case a \"workspace\" directory", taskPath))
		}
		if sc.Tools != "" {
			file, err := flagFile("tools", sc.Tools, "fixture")
			if err != nil {
				return nil, nil, wrap("tools", err)
			}
			f, err := loadFixtures(rel(file))
			if err != nil {
				return nil, nil, wrap("tools", err)
			}
			ec.executor = f
		}
		cases = append(cases, ec)
	}
	return suite, cases, nil
}

// evalTrial is one trial in the report.
type evalTrial struct {
	RunID    string   `json:"run_id"`
	Status   string   `json:"status"`
	Passed   bool     `json:"passed"`
	Tokens   uint64   `json:"tokens"`
	CostUSD  float64  `json:"cost_usd"`
	WallMS   float64  `json:"wall_ms"`
	Refused  int      `json:"refused_attempts"`
	Failures []string `json:"failures"`
}

// evalCaseReport is one case in the report.
type evalCaseReport struct {
	Name string `json:"name"`
	evaluate.Stats
	Trials []evalTrial `json:"trial_results"`
}

// evalReport is what `evaluate --json` prints.
type evalReport struct {
	Suite       string  `json:"suite"`
	MinPassRate float64 `json:"min_pass_rate"`
	Passed      bool    `json:"passed"`
	// CostNote says what the costs are priced at.
	CostNote string           `json:"cost_note"`
	Cases    []evalCaseReport `json:"cases"`
	Overall  evaluate.Stats   `json:"overall"`
}

func (o *evaluateOptions) run(ctx context.Context, e *env, path string, cases []evalCase, threshold float64, prices *pricing.Table) error {
	dir, err := os.MkdirTemp("", "rein-evaluate-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	note := "US dollars, at rein's default prices"
	if o.prices != "" {
		note = fmt.Sprintf("US dollars, at the prices of %s over rein's defaults", o.prices)
	}
	for _, c := range cases {
		if m := c.contract.GetModel(); m != nil {
			if _, ok := prices.Lookup(m.GetProvider(), m.GetName()); !ok {
				fmt.Fprintf(e.stderr, "rein: case %q: no price for model %s/%s; its cost counts as 0 (give it one in a --prices file)\n",
					c.name, m.GetProvider(), m.GetName())
			}
		}
	}
	rep := evalReport{Suite: path, MinPassRate: threshold, CostNote: note}
	var all []evaluate.Trial
	for i, c := range cases {
		caseDir := filepath.Join(dir, fmt.Sprintf("case-%d", i+1))
		if err := os.Mkdir(caseDir, 0o700); err != nil {
			return err
		}
		trials, err := o.runCase(ctx, e, caseDir, c, prices)
		if err != nil {
			if ctx.Err() != nil {
				return &exitErr{code: exitCancelled, err: errors.New("evaluation interrupted")}
			}
			return fmt.Errorf("case %q: %w", c.name, err)
		}
		all = append(all, trials...)
		cr := evalCaseReport{Name: c.name, Stats: evaluate.Summarize(trials), Trials: make([]evalTrial, len(trials))}
		for j, t := range trials {
			cr.Trials[j] = evalTrial{RunID: t.RunID, Status: t.Status, Passed: t.Passed(), Tokens: t.Tokens, CostUSD: t.CostUSD,
				WallMS: float64(t.Wall) / float64(time.Millisecond), Refused: t.Refused, Failures: t.Failures}
			if cr.Trials[j].Failures == nil {
				cr.Trials[j].Failures = []string{}
			}
		}
		rep.Cases = append(rep.Cases, cr)
	}
	rep.Overall = evaluate.Summarize(all)
	rep.Passed = rep.Overall.PassRate >= threshold
	if e.json {
		err = writeJSON(e.stdout, rep, false)
	} else {
		err = writeEvalTable(e.stdout, rep)
	}
	if err != nil {
		return err
	}
	if !rep.Passed {
		return &exitErr{code: exitError, err: fmt.Errorf("pass rate %.2f is under the minimum %.2f", rep.Overall.PassRate, threshold)}
	}
	return nil
}

// runCase runs a case's trials, up to o.concurrency at once, and grades
// them in trial order. Its files go under dir: the database of the embedded
// server its trials share or, for a case with a workspace, each trial's own.
func (o *evaluateOptions) runCase(ctx context.Context, e *env, dir string, c evalCase, prices *pricing.Table) ([]evaluate.Trial, error) {
	var shared *conn
	if c.workspace == "" {
		cn, err := embedded(context.WithoutCancel(ctx), filepath.Join(dir, "rein.db"), &setup{executor: c.executor, prices: prices})
		if err != nil {
			return nil, err
		}
		defer cn.close()
		shared = cn
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	trials := make([]evaluate.Trial, o.trials)
	errs := make([]error, o.trials)
	sem := make(chan struct{}, o.concurrency)
	var wg sync.WaitGroup
	var mu sync.Mutex // guards writes to e.stderr
	for i := range o.trials {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if ctx.Err() != nil {
				errs[i] = ctx.Err()
				return
			}
			var t evaluate.Trial
			var err error
			if shared != nil {
				t, err = sharedTrial(ctx, shared, c)
			} else {
				t, err = workspaceTrial(ctx, filepath.Join(dir, fmt.Sprintf("trial-%d", i+1)), c, prices)
			}
			if err != nil {
				errs[i] = err
				cancel()
				return
			}
			trials[i] = t
			verdict := "passed"
			if !t.Passed() {
				verdict = "failed"
			}
			mu.Lock()
			fmt.Fprintf(e.stderr, "rein: %s trial %d/%d: run %s %s, %s\n", c.name, i+1, o.trials, t.RunID, t.Status, verdict)
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return nil, err
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return trials, nil
}

// sharedTrial runs and grades a trial of a case without a workspace on the
// case's server.
func sharedTrial(ctx context.Context, cn *conn, c evalCase) (evaluate.Trial, error) {
	obs, err := runTrial(ctx, cn.Client, c.contract)
	if err != nil {
		return evaluate.Trial{}, err
	}
	return evaluate.Trial{Observation: obs, Failures: evaluate.Grade(c.expect, obs)}, nil
}

// workspaceTrial runs a trial of a case with a workspace on an embedded
// server of its own, under dir (removed afterwards), whose workspace is a
// fresh copy of the case's; once the run pauses or ends and the server is
// closed, it grades the run and the workspace it left.
func workspaceTrial(ctx context.Context, dir string, c evalCase, prices *pricing.Table) (evaluate.Trial, error) {
	defer func() { _ = os.RemoveAll(dir) }()
	if err := os.Mkdir(dir, 0o700); err != nil {
		return evaluate.Trial{}, err
	}
	ws := filepath.Join(dir, "workspace")
	if err := evaluate.CopyWorkspace(c.workspace, ws); err != nil {
		return evaluate.Trial{}, err
	}
	files, err := workspace.New(ws, nil) // an evaluation's server holds no secrets
	if err != nil {
		return evaluate.Trial{}, err
	}
	cn, err := embedded(context.WithoutCancel(ctx), filepath.Join(dir, "rein.db"),
		&setup{executor: tools.Join(c.executor, files), workspace: ws, prices: prices})
	if err != nil {
		return evaluate.Trial{}, err
	}
	obs, err := runTrial(ctx, cn.Client, c.contract)
	cn.close()
	if err != nil {
		return evaluate.Trial{}, err
	}
	fails := append(evaluate.Grade(c.expect, obs), evaluate.GradeWorkspace(ctx, c.expect, ws)...)
	if err := ctx.Err(); err != nil {
		return evaluate.Trial{}, err
	}
	return evaluate.Trial{Observation: obs, Failures: fails}, nil
}

// runTrial starts a run of contract, follows it until it pauses or ends, and
// observes it from its state and its events. Wall time runs from StartRun to
// the pause or end.
func runTrial(ctx context.Context, c *client.Client, contract *reinv1.TaskContract) (evaluate.Observation, error) {
	runs := c.Runs
	start := time.Now()
	resp, err := runs.StartRun(ctx, &reinv1.StartRunRequest{RequestId: randomID(), Contract: proto.Clone(contract).(*reinv1.TaskContract)})
	if err != nil {
		return evaluate.Observation{}, err
	}
	run, err := follow(ctx, io.Discard, c, resp.GetRun().GetRunId(), 0)
	if err != nil {
		return evaluate.Observation{}, err
	}
	obs := evaluate.Observation{
		RunID:      run.GetRunId(),
		Status:     runstate.StatusName(run.GetStatus()),
		ResultText: run.GetResult().GetText(),
		Tokens:     runstate.UsageTokens(run.GetUsage()),
		CostUSD:    run.GetCostUsd(),
		Wall:       time.Since(start),
	}
	if d := run.GetResult().GetData(); d != nil {
		obs.ResultData = d.AsInterface()
	}
	if run.GetDelegation() != nil {
		// Tokens and cost count over the run's tree: its children's too.
		tree, err := fetchTree(ctx, runs, obs.RunID)
		if err != nil {
			return evaluate.Observation{}, err
		}
		spent, _ := tree.spend()
		obs.Tokens, obs.CostUSD = spent.Tokens, spent.CostUSD
	}
	req := &reinv1.ListEventsRequest{RunId: obs.RunID, PageSize: 10000}
	for {
		page, err := runs.ListEvents(ctx, req)
		if err != nil {
			return evaluate.Observation{}, err
		}
		for _, ev := range page.GetEvents() {
			switch p := ev.GetPayload().(type) {
			case *reinv1.Event_ToolRequested:
				obs.Called = append(obs.Called, p.ToolRequested.GetTool())
			case *reinv1.Event_ToolRefused:
				obs.Refused++
			}
		}
		if page.GetNextPageToken() == "" {
			break
		}
		req.PageToken = page.GetNextPageToken()
	}
	return obs, nil
}

// writeEvalTable prints the report for a person: a line per case, the
// overall line, then why trials failed.
func writeEvalTable(w io.Writer, rep evalReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tPASSED\tPASS RATE\tMEDIAN TOKENS\tMEDIAN COST\tP95 WALL MS\tREFUSED")
	line := func(name string, s evaluate.Stats) {
		fmt.Fprintf(tw, "%s\t%d/%d\t%.0f%%\t%g\t$%.6f\t%.1f\t%d\n", name, s.Passed, s.Trials, s.PassRate*100,
			s.MedianTokens, s.MedianCostUSD, s.P95WallMS, s.Refused)
	}
	for _, c := range rep.Cases {
		line(c.Name, c.Stats)
	}
	line("overall", rep.Overall)
	if err := tw.Flush(); err != nil {
		return err
	}
	verdict := "passed"
	if !rep.Passed {
		verdict = "FAILED"
	}
	fmt.Fprintf(w, "\ncost: %s. minimum pass rate %.2f: %s\n", rep.CostNote, rep.MinPassRate, verdict)
	for _, c := range rep.Cases {
		for i, t := range c.Trials {
			for _, f := range t.Failures {
				// A check's output goes on the lines below, indented.
				f = strings.ReplaceAll(f, "\n", "\n    ")
				fmt.Fprintf(w, "%s trial %d (run %s): %s\n", c.Name, i+1, t.RunID, f)
			}
		}
	}
	return nil
}
