package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/export"
	"github.com/reinhq/rein/internal/lifecycle"
	"github.com/reinhq/rein/internal/replay"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/storeformat"
)

func newUpgradeCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "upgrade",
		Short: "Check that this rein carries on the runs a store holds before it is deployed on it",
		Example: `  rein upgrade check --server staging.internal:7433 --token "$REIN_ADMIN_TOKEN"
  rein upgrade check --db rein.db --since 168h --sample 200`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageError("name a subcommand: rein upgrade check")
		},
	}
	cmd.AddCommand(newUpgradeCheckCmd(e))
	return cmd
}

// upgradeCheckOptions are rein upgrade check's flags.
type upgradeCheckOptions struct {
	since  time.Duration
	sample int
	seed   uint64
	tenant string
}

func newUpgradeCheckCmd(e *env) *cobra.Command {
	var o upgradeCheckOptions
	cmd := &cobra.Command{
		Use: "check",
		Example: `  rein upgrade check --server staging.internal:7233 --token-file admin.token
  rein upgrade check --db /var/lib/rein/rein.db --since 168h --sample 200 --seed 7
  rein upgrade check --server staging.internal:7233 --json | jq -c 'select(.result == "diverged")'`,
		Short: "Replay a live store's runs through this rein's harness and report every run that would diverge",
		Long: `Replay the runs a store holds (paused, ended and archived ones) through this
rein's harness, as rein replay does a recording: each run's recorded model
replies, tool results and people's decisions are fed, in order and on the
recorded clock, into an in-memory log. No model and no tool is called, and
nothing is written to the store. A delegating run is replayed with its
children's recorded results, and each child on its own.

Per run it prints "ok", the first divergence (the sequence, the first field
that differs, the expected event and the event this build made), or why the
run was skipped (a run still running or queued, a recording replay cannot
drive, a run deleted since it was listed); then a summary, and the store
formats involved.

With --server the runs are read through the API (ListRuns, ListEvents,
GetBlobs), which for this command needs the admin role: run it in a deploy
pipeline against a staging server with an admin's token. A principal sees
its own tenant's runs. With --db the file is opened read-only (every tenant's
runs, and the archive beside it); a file a running server holds is locked:
check that server with --server instead.

Exit 0 when every run checked matches; 1 when any run diverged or could not
be read or replayed; 2 on bad usage; 4 without the admin role.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if e.server != "" && cmd.Flags().Changed("db") {
				return usageError("give --server or --db, not both: --server checks a running server's runs through its API, --db a store file")
			}
			if o.since < 0 || o.sample < 0 {
				return usageError("--since and --sample must not be negative")
			}
			if !cmd.Flags().Changed("seed") {
				o.seed = rand.Uint64()
			}
			return o.run(cmd.Context(), e)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.since, "since", 0, "only runs created or changed this long ago or later (168h: the last week; 0: every run)")
	f.IntVar(&o.sample, "sample", 0, "check this many of the runs, picked at random (0: every run); the summary names the --seed that picks them again")
	f.Uint64Var(&o.seed, "seed", 0, "the seed --sample picks its runs with: the same seed on the same store picks the same runs (default: a random one)")
	f.StringVar(&o.tenant, "tenant", "", "only this tenant's runs (with --server the token's tenant is the only one it sees)")
	e.commandTimeoutFlag(cmd)
	return cmd
}

// runSource is where rein upgrade check reads runs: a --server through the
// API, or a --db file's store.
type runSource interface {
	// list returns a page of runs after the cursor ("" the first) and the
	// next cursor, "" after the last page.
	list(ctx context.Context, after string) ([]*reinv1.Run, string, error)
	// events returns a run's whole log.
	events(ctx context.Context, runID string) ([]*reinv1.Event, error)
	export.Blobs
	// storeFormat is the store's active format (docs/upgrading.md).
	storeFormat(ctx context.Context) (storeformat.Format, error)
	close()
}

// apiSource reads runs through a rein server's API.
type apiSource struct{ cn *conn }

func (s apiSource) list(ctx context.Context, after string) ([]*reinv1.Run, string, error) {
	resp, err := s.cn.runs.ListRuns(ctx, &reinv1.ListRunsRequest{PageSize: 1000, PageToken: after})
	return resp.GetRuns(), resp.GetNextPageToken(), err
}

func (s apiSource) events(ctx context.Context, runID string) ([]*reinv1.Event, error) {
	return allEvents(ctx, s.cn.runs, runID, 0)
}

func (s apiSource) Blobs(ctx context.Context, runID string, hashes []string) (map[string][]byte, error) {
	return serverBlobs{runs: s.cn.runs}.Blobs(ctx, runID, hashes)
}

func (s apiSource) storeFormat(ctx context.Context) (storeformat.Format, error) {
	info, err := s.cn.runs.GetServerInfo(ctx, &reinv1.GetServerInfoRequest{})
	if err != nil {
		return 0, err
	}
	if info.GetFormats() == nil {
		return 0, errors.New("the server does not report store formats: it is a build from before them")
	}
	return storeformat.Format(info.GetFormats().GetActive()), nil
}

func (s apiSource) close() { s.cn.close() }

// storeSource reads runs from a store opened read-only, archived runs from
// the archive beside it.
type storeSource struct {
	st     store.Store
	tenant string
}

func (s storeSource) list(ctx context.Context, after string) ([]*reinv1.Run, string, error) {
	page, err := s.st.List(ctx, store.Filter{Tenant: s.tenant, Limit: 1000, After: after})
	if err != nil {
		return nil, "", err
	}
	runs := make([]*reinv1.Run, len(page.Runs))
	for i, st := range page.Runs {
		runs[i] = st.Proto(false)
	}
	return runs, page.Next, nil
}

func (s storeSource) events(ctx context.Context, runID string) ([]*reinv1.Event, error) {
	var out []*reinv1.Event
	for {
		evs, err := s.st.Events(ctx, runID, uint64(len(out)), 10000)
		if err != nil {
			return nil, err
		}
		if len(evs) == 0 {
			return out, nil
		}
		out = append(out, evs...)
	}
}

func (s storeSource) Blobs(ctx context.Context, runID string, hashes []string) (map[string][]byte, error) {
	return s.st.Blobs(ctx, runID, hashes)
}

func (s storeSource) storeFormat(context.Context) (storeformat.Format, error) {
	f, ok := s.st.(interface {
		StoreFormat() (storeformat.Format, error)
	})
	if !ok {
		return 0, errors.New("this store does not record a format")
	}
	return f.StoreFormat()
}

func (s storeSource) close() { _ = s.st.Close() }

// openRunSource opens the --server (checking the caller holds the admin
// role) or the --db file, read-only.
func (o *upgradeCheckOptions) openRunSource(ctx context.Context, e *env) (runSource, error) {
	if e.server != "" {
		cn, err := connect(ctx, &e.target, e.stderr, nil)
		if err != nil {
			return nil, err
		}
		// Every RPC the check reads with is a viewer's; the check asks for
		// an admin, whose token sees every run of its tenant, so that a
		// pipeline's token is one chosen for it. ListDeletions is the
		// admin's read that changes nothing.
		err = cn.retry(ctx, func(ctx context.Context) error {
			_, err := cn.runs.ListDeletions(ctx, &reinv1.ListDeletionsRequest{PageSize: 1})
			return err
		})
		if status.Code(err) == codes.PermissionDenied {
			cn.close()
			return nil, &exitErr{code: exitDenied, err: fmt.Errorf("rein upgrade check needs the admin role on %s, and this token's principal lacks it (%s): run it with an admin's token (--token, --token-file)",
				e.server, status.Convert(err).Message())}
		}
		if err != nil {
			cn.close()
			return nil, err
		}
		return apiSource{cn: cn}, nil
	}
	if !exists(e.db) {
		return nil, noStore(e.db)
	}
	st, err := openStoreReadOnly(e.db)
	if err != nil {
		return nil, fmt.Errorf("rein upgrade check --db: %w", err)
	}
	if b, ok := st.(lifecycle.Backend); ok {
		st = lifecycle.NewStore(b, embeddedArchive(ctx, e.db))
	}
	return storeSource{st: st, tenant: o.tenant}, nil
}

// The results of one run's check, as --json names them.
const (
	checkEqual    = "equal"
	checkDiverged = "diverged"
	checkSkipped  = "skipped"
	checkFailed   = "failed"
)

// runCheck is one run's check.
type runCheck struct {
	run    *reinv1.Run
	result string
	// why is a skipped or failed run's reason.
	why    string
	replay replay.Result
}

// checkSummary counts the runs an upgrade check saw.
type checkSummary struct {
	// listed is how many runs passed --tenant and --since.
	listed                  int
	equal, diverged, failed int
	// skipped counts the runs skipped, by why.
	skipped map[string]int
	seed    uint64
	formats formatReport
}

func (o *upgradeCheckOptions) run(ctx context.Context, e *env) error {
	src, err := o.openRunSource(ctx, e)
	if err != nil {
		return err
	}
	defer src.close()
	runs, err := o.pick(ctx, src)
	if err != nil {
		return err
	}
	if o.tenant != "" && runs.listed == 0 && runs.seen > 0 {
		fmt.Fprintf(e.stderr, "rein: none of the %d runs listed is tenant %q's (through --server a principal lists its own tenant's runs only: use that tenant's admin token)\n", runs.seen, o.tenant)
	}
	sum := checkSummary{listed: runs.listed, skipped: map[string]int{}, seed: o.seed, formats: upgradeFormats(ctx, src)}
	for _, c := range runs.skipped {
		sum.skipped[c.why]++
		if err := o.print(e, c); err != nil {
			return err
		}
	}
	for _, r := range runs.picked {
		c := checkRun(ctx, src, r)
		if err := ctx.Err(); err != nil {
			return err
		}
		switch c.result {
		case checkEqual:
			sum.equal++
		case checkDiverged:
			sum.diverged++
		case checkFailed:
			sum.failed++
		case checkSkipped:
			sum.skipped[c.why]++
		}
		if err := o.print(e, c); err != nil {
			return err
		}
	}
	if err := o.printSummary(e, sum); err != nil {
		return err
	}
	checked := sum.equal + sum.diverged + sum.failed
	switch {
	case sum.diverged > 0 && sum.failed > 0:
		return &exitErr{code: exitError, err: fmt.Errorf("%d of %d runs checked diverged and %d could not be checked: this build would not carry them on as they were recorded",
			sum.diverged, checked, sum.failed)}
	case sum.diverged > 0:
		return &exitErr{code: exitError, err: fmt.Errorf("%d of %d runs checked diverged: this build would not carry them on as they were recorded", sum.diverged, checked)}
	case sum.failed > 0:
		return &exitErr{code: exitError, err: fmt.Errorf("%d of %d runs could not be checked (FAILED above): fix what it says and check again", sum.failed, checked)}
	}
	return nil
}

// selection is the runs a check looks at: those it replays, and those it
// skips at sight (running, queued).
type selection struct {
	// seen is how many runs the store listed; listed how many of them
	// passed --tenant and --since.
	seen    int
	listed  int
	picked  []*reinv1.Run
	skipped []runCheck
}

// pick lists the runs, keeps those of --tenant and --since, skips the
// ones still running or queued, and picks --sample of the rest with --seed.
func (o *upgradeCheckOptions) pick(ctx context.Context, src runSource) (selection, error) {
	var all []*reinv1.Run
	for after := ""; ; {
		page, next, err := src.list(ctx, after)
		if err != nil {
			return selection{}, err
		}
		all = append(all, page...)
		if next == "" {
			break
		}
		after = next
	}
	var cut time.Time
	if o.since > 0 {
		cut = time.Now().Add(-o.since)
	}
	s := selection{seen: len(all)}
	var candidates []*reinv1.Run
	for _, r := range all {
		if o.tenant != "" && r.GetTenant() != o.tenant {
			continue
		}
		if !cut.IsZero() && r.GetUpdatedAt().AsTime().Before(cut) && r.GetCreatedAt().AsTime().Before(cut) {
			continue
		}
		s.listed++
		switch r.GetStatus() {
		case reinv1.RunStatus_RUN_STATUS_RUNNING:
			s.skipped = append(s.skipped, runCheck{run: r, result: checkSkipped, why: "running: its log is still being written; check it once it pauses or ends"})
			continue
		case reinv1.RunStatus_RUN_STATUS_QUEUED:
			s.skipped = append(s.skipped, runCheck{run: r, result: checkSkipped, why: "queued: it has not taken a step"})
			continue
		}
		candidates = append(candidates, r)
	}
	// By run ID, so that a seed picks the same runs whatever order the
	// store lists them in.
	slices.SortFunc(candidates, func(a, b *reinv1.Run) int { return strings.Compare(a.GetRunId(), b.GetRunId()) })
	if o.sample > 0 && o.sample < len(candidates) {
		rng := rand.New(rand.NewPCG(o.seed, 0))
		rng.Shuffle(len(candidates), func(i, j int) { candidates[i], candidates[j] = candidates[j], candidates[i] })
		candidates = candidates[:o.sample]
		slices.SortFunc(candidates, func(a, b *reinv1.Run) int { return strings.Compare(a.GetRunId(), b.GetRunId()) })
	}
	s.picked = candidates
	return s, nil
}

// checkRun replays one run with its tree's recorded results. Only that
// tree is held in memory: a child is read again when it is checked on its
// own.
func checkRun(ctx context.Context, src runSource, r *reinv1.Run) runCheck {
	c := runCheck{run: r}
	x, err := treeOf(ctx, src, r.GetRunId())
	switch {
	case status.Code(err) == codes.NotFound || errors.Is(err, store.ErrNotFound):
		c.result, c.why = checkSkipped, "deleted since it was listed"
		return c
	case err != nil:
		c.result, c.why = checkFailed, "could not be read: "+errText(err)
		return c
	}
	res, err := replay.Run(ctx, x.GetEvents(), replay.Options{Blobs: x.GetBlobs(), Children: replay.TreeChildren(x)})
	switch {
	case errors.Is(err, replay.ErrUnsupported):
		c.result, c.why = checkSkipped, "replay cannot drive it: "+err.Error()
	case err != nil:
		c.result, c.why = checkFailed, "this build could not replay it: "+err.Error()
	case res.Divergence != nil:
		c.result, c.replay = checkDiverged, res
	default:
		c.result, c.replay = checkEqual, res
	}
	return c
}

// treeOf is the export of run id with its children's, as rein export
// --tree makes it.
func treeOf(ctx context.Context, src runSource, id string) (*reinv1.RunExport, error) {
	evs, err := src.events(ctx, id)
	if err != nil {
		return nil, err
	}
	x, err := export.New(ctx, id, evs, src)
	if err != nil {
		return nil, err
	}
	for _, ev := range evs {
		for _, ch := range ev.GetDelegationStarted().GetChildren() {
			cx, err := treeOf(ctx, src, ch.GetRunId())
			if err != nil {
				return nil, fmt.Errorf("child %s: %w", ch.GetRunId(), err)
			}
			x.Children = append(x.Children, cx)
		}
	}
	if err := export.Check(x); err != nil {
		return nil, err
	}
	return x, nil
}

// errText is an error as a sentence: a gRPC status's message and code.
func errText(err error) string {
	if st, ok := status.FromError(err); ok {
		return fmt.Sprintf("%s (%s)", st.Message(), st.Code())
	}
	return err.Error()
}

// print writes one run's check: a line (or a few, for a divergence), or an
// object a line with --json.
func (o *upgradeCheckOptions) print(e *env, c runCheck) error {
	r := c.run
	if e.json {
		out := map[string]any{"run_id": r.GetRunId(), "tenant": r.GetTenant(), "status": runstate.StatusName(r.GetStatus()),
			"archived": r.GetArchive() != nil, "result": c.result}
		if c.why != "" {
			out["reason"] = c.why
		}
		if c.result == checkEqual || c.result == checkDiverged {
			out["events"] = c.replay.Events
		}
		if d := c.replay.Divergence; d != nil {
			out["sequence"] = d.Sequence
			out["field"] = d.Field
			out["expected"] = eventOrNil(d.Expected)
			out["got"] = eventOrNil(d.Got)
		}
		return writeJSON(e.stdout, out, false)
	}
	where := runstate.StatusName(r.GetStatus())
	if r.GetArchive() != nil {
		where += ", archived"
	}
	switch c.result {
	case checkEqual:
		fmt.Fprintf(e.stdout, "ok %s (%s, %d events)\n", r.GetRunId(), where, c.replay.Events)
	case checkDiverged:
		d := c.replay.Divergence
		fmt.Fprintf(e.stdout, "DIVERGED %s (%s) at sequence %d\n", r.GetRunId(), where, d.Sequence)
		if d.Field != "" {
			fmt.Fprintf(e.stdout, "  field:    %s\n", d.Field)
		}
		fmt.Fprintf(e.stdout, "  expected: %s\n  got:      %s\n", lineOrNone(d.Expected), lineOrNone(d.Got))
	case checkFailed:
		fmt.Fprintf(e.stdout, "FAILED %s (%s): %s\n", r.GetRunId(), where, c.why)
	default:
		fmt.Fprintf(e.stdout, "skipped %s (%s): %s\n", r.GetRunId(), where, c.why)
	}
	return nil
}

// printSummary writes the counts and the formats: the last lines, or the
// last object with --json.
func (o *upgradeCheckOptions) printSummary(e *env, s checkSummary) error {
	skipped := 0
	reasons := make([]string, 0, len(s.skipped))
	for why, n := range s.skipped {
		skipped += n
		reasons = append(reasons, why)
	}
	slices.Sort(reasons)
	checked := s.equal + s.diverged + s.failed
	if e.json {
		out := map[string]any{"summary": map[string]any{
			"runs": s.listed, "checked": checked, "equal": s.equal, "diverged": s.diverged, "failed": s.failed,
			"skipped": skipped, "skipped_by_reason": s.skipped,
		}, "formats": s.formats.json()}
		if o.sample > 0 {
			out["summary"].(map[string]any)["sample"] = o.sample
			out["summary"].(map[string]any)["seed"] = s.seed
		}
		return writeJSON(e.stdout, out, false)
	}
	fmt.Fprintf(e.stdout, "\n%d runs: %d checked (%d equal, %d diverged, %d failed), %d skipped\n", s.listed, checked, s.equal, s.diverged, s.failed, skipped)
	for _, why := range reasons {
		fmt.Fprintf(e.stdout, "  skipped %d: %s\n", s.skipped[why], why)
	}
	if o.sample > 0 && o.sample < s.listed {
		fmt.Fprintf(e.stdout, "  a sample of %d runs, picked with --seed %d\n", o.sample, s.seed)
	}
	fmt.Fprintf(e.stdout, "formats: %s\n", s.formats)
	return nil
}

// formatReport is the store formats an upgrade check crosses.
type formatReport struct {
	// Store is the format the store (a --db file, or the cluster's active
	// version) is at; Build is the range this build reads and writes;
	// Finalization says whether deploying this build would leave a
	// finalization pending.
	Store, Build, Finalization string
}

func (f formatReport) String() string {
	return fmt.Sprintf("store %s, this build %s, finalization needed: %s", f.Store, f.Build, f.Finalization)
}

func (f formatReport) json() map[string]any {
	return map[string]any{"store": f.Store, "build": f.Build, "finalization": f.Finalization}
}

// upgradeFormats reports the store formats involved in deploying this
// build on src: the store's active format (a --db file's, or the server's),
// the formats this build reads and writes, and what deploying it means for
// the store: nothing, a finalization to come (docs/upgrading.md), or a
// refusal to start.
func upgradeFormats(ctx context.Context, src runSource) formatReport {
	b := storeformat.This()
	rep := formatReport{Store: "unknown", Build: b.String(), Finalization: "unknown"}
	active, err := src.storeFormat(ctx)
	if err != nil {
		rep.Store = "unknown (" + err.Error() + ")"
		return rep
	}
	rep.Store = strconv.Itoa(int(active))
	switch {
	case b.Serves(active, "the store") != nil:
		rep.Finalization = fmt.Sprintf("this build cannot serve format %d: it would refuse to start", active)
	case b.Writes.Max > active:
		rep.Finalization = fmt.Sprintf("yes, from %d to %d once every server runs this build", active, b.Writes.Max)
	default:
		rep.Finalization = "no"
	}
	return rep
}
