package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// scheduleOptions are the flags of rein schedule create.
type scheduleOptions struct {
	cron, task, model, baseURL, tz, overlap, catchUp string
}

func newScheduleCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use: "schedule",
		Example: `  rein schedule list --server rein.internal:7233
  rein schedule pause nightly-report --server rein.internal:7233
  rein schedule trigger nightly-report --server rein.internal:7233`,
		Short: "Start runs on a schedule: create, list, pause, resume, delete, trigger",
		Long: `A schedule starts a run of its task at each tick of its cron expression, in
rein serve, exactly once per tick across replicas and restarts: each run's
request ID comes from the schedule and the tick, and carries the labels
schedule=NAME and schedule_tick=TIME. Schedules belong to your tenant.
They run in a server: give --server.`,
	}
	o := &scheduleOptions{}
	create := &cobra.Command{
		Use:     "create NAME --cron EXPR --task FILE",
		Example: `  rein schedule create nightly-report --cron "0 2 * * *" --tz Europe/Berlin --task report.json --server rein.internal:7233`,
		Short:   "Create a schedule",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := loadTask(o.task)
			if err != nil {
				return err
			}
			if c.Model, err = modelFlag(c.GetModel(), o.model, o.baseURL); err != nil {
				return err
			}
			overlap, ok := map[string]reinv1.ScheduleOverlap{"skip": reinv1.ScheduleOverlap_SCHEDULE_OVERLAP_SKIP, "allow": reinv1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW}[o.overlap]
			if !ok {
				return usageError("--overlap %q: give skip or allow", o.overlap)
			}
			catchUp, ok := map[string]reinv1.ScheduleCatchUp{"none": reinv1.ScheduleCatchUp_SCHEDULE_CATCH_UP_NONE, "one": reinv1.ScheduleCatchUp_SCHEDULE_CATCH_UP_ONE}[o.catchUp]
			if !ok {
				return usageError("--catch-up %q: give none or one", o.catchUp)
			}
			sc := &reinv1.Schedule{Name: args[0], Cron: o.cron, TimeZone: o.tz, Contract: c, Overlap: overlap, CatchUp: catchUp}
			return scheduleCall(cmd.Context(), e, func(ctx context.Context, cn *conn) (*reinv1.Schedule, error) {
				resp, err := cn.runs.CreateSchedule(ctx, &reinv1.CreateScheduleRequest{Schedule: sc})
				return resp.GetSchedule(), err
			})
		},
	}
	create.Flags().StringVar(&o.cron, "cron", "", "the cron expression: five fields (minute hour day month weekday), or @hourly, @every 30s; required")
	create.Flags().StringVar(&o.task, "task", "", "the task file each tick's run starts from; required")
	create.Flags().StringVar(&o.model, "model", "", "the model, overriding the task's: openai:NAME, anthropic:NAME or script:FILE")
	create.Flags().StringVar(&o.baseURL, "base-url", "", "the model provider's base URL, for OpenAI-compatible servers")
	create.Flags().StringVar(&o.tz, "tz", "", "the time zone the expression is read in (IANA, such as Europe/Berlin); default UTC")
	create.Flags().StringVar(&o.overlap, "overlap", "skip", "what a tick does while the last run is going on: skip or allow")
	create.Flags().StringVar(&o.catchUp, "catch-up", "none", "what ticks missed while no server ran them come to: none, or one run for the latest")
	_ = create.MarkFlagRequired("cron")
	_ = create.MarkFlagRequired("task")

	list := &cobra.Command{
		Use:   "list",
		Short: "List your tenant's schedules",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cn, err := scheduleConn(cmd.Context(), &e.target, e.stderr)
			if err != nil {
				return err
			}
			defer cn.close()
			var resp *reinv1.ListSchedulesResponse
			if err := cn.retry(cmd.Context(), func(ctx context.Context) (err error) {
				resp, err = cn.runs.ListSchedules(ctx, &reinv1.ListSchedulesRequest{})
				return err
			}); err != nil {
				return err
			}
			if e.json {
				for _, sc := range resp.GetSchedules() {
					if err := writeJSON(e.stdout, protoJSON(sc), false); err != nil {
						return err
					}
				}
				return nil
			}
			w := tabwriter.NewWriter(e.stdout, 0, 2, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tCRON\tZONE\tSTATE\tNEXT\tLAST RUN")
			for _, sc := range resp.GetSchedules() {
				state, next := "active", ""
				if sc.GetPaused() {
					state = "paused"
				}
				if t := sc.GetNextTick(); t != nil && !sc.GetPaused() {
					next = t.AsTime().UTC().Format(time.RFC3339)
				}
				zone := sc.GetTimeZone()
				if zone == "" {
					zone = "UTC"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", sc.GetName(), sc.GetCron(), zone, state, next, sc.GetLastRunId())
			}
			return w.Flush()
		},
	}
	byName := func(use, short string, call func(ctx context.Context, cn *conn, name string) (*reinv1.Schedule, error)) *cobra.Command {
		return &cobra.Command{Use: use + " NAME", Short: short, Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
			return scheduleCall(cmd.Context(), e, func(ctx context.Context, cn *conn) (*reinv1.Schedule, error) { return call(ctx, cn, args[0]) })
		}}
	}
	pause := byName("pause", "Pause a schedule: no tick starts a run", func(ctx context.Context, cn *conn, name string) (*reinv1.Schedule, error) {
		resp, err := cn.runs.PauseSchedule(ctx, &reinv1.PauseScheduleRequest{Name: name})
		return resp.GetSchedule(), err
	})
	resume := byName("resume", "Resume a paused schedule, from now", func(ctx context.Context, cn *conn, name string) (*reinv1.Schedule, error) {
		resp, err := cn.runs.ResumeSchedule(ctx, &reinv1.ResumeScheduleRequest{Name: name})
		return resp.GetSchedule(), err
	})
	del := byName("delete", "Delete a schedule; its runs stay", func(ctx context.Context, cn *conn, name string) (*reinv1.Schedule, error) {
		_, err := cn.runs.DeleteSchedule(ctx, &reinv1.DeleteScheduleRequest{Name: name})
		return nil, err
	})
	var requestID string
	trigger := &cobra.Command{Use: "trigger NAME", Short: "Start a run of a schedule now, outside its ticks", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if requestID == "" {
				requestID = randomID()
			}
			cn, err := scheduleConn(cmd.Context(), &e.target, e.stderr)
			if err != nil {
				return err
			}
			defer cn.close()
			var run *reinv1.Run
			if err := cn.retry(cmd.Context(), func(ctx context.Context) error {
				resp, err := cn.runs.TriggerSchedule(ctx, &reinv1.TriggerScheduleRequest{Name: args[0], RequestId: requestID})
				run = resp.GetRun()
				return err
			}); err != nil {
				return err
			}
			return writeJSON(e.stdout, summarize(run), !e.json)
		}}
	trigger.Flags().StringVar(&requestID, "request-id", "", "idempotency key; the same key starts one run (default: random, the same for every retry)")
	for _, c := range []*cobra.Command{create, list, pause, resume, del, trigger} {
		e.commandTimeoutFlag(c)
		cmd.AddCommand(c)
	}
	return cmd
}

// scheduleConn connects to --server: schedules run in a server.
func scheduleConn(ctx context.Context, t *target, stderr io.Writer) (*conn, error) {
	if t.server == "" {
		return nil, usageError("rein schedule needs --server: schedules are kept and run by rein serve")
	}
	return connect(ctx, t, stderr, nil)
}

// scheduleCall makes call (retried while the server is unavailable) and
// prints the schedule it returns, if any.
func scheduleCall(ctx context.Context, e *env, call func(ctx context.Context, cn *conn) (*reinv1.Schedule, error)) error {
	cn, err := scheduleConn(ctx, &e.target, e.stderr)
	if err != nil {
		return err
	}
	defer cn.close()
	var sc *reinv1.Schedule
	if err := cn.retry(ctx, func(ctx context.Context) (err error) {
		sc, err = call(ctx, cn)
		return err
	}); err != nil {
		return err
	}
	if sc == nil {
		return nil
	}
	return writeJSON(e.stdout, protoJSON(sc), !e.json)
}
