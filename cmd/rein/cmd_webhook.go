package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/webhook"
	"github.com/reinhq/rein/server"
)

// webhookFlags are rein serve's webhook flags.
type webhookFlags struct {
	publicURL    string
	retryFor     time.Duration
	timeout      time.Duration
	allowPrivate bool
}

func (f *webhookFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.publicURL, "public-url", "", "the console's address as people reach it (https://rein.example.com); a webhook about a paused run links to the run there")
	fs.DurationVar(&f.retryFor, "webhook-retry-for", 24*time.Hour, "how long a webhook delivery is retried, with backoff, before it fails and its subscription is paused")
	fs.DurationVar(&f.timeout, "webhook-timeout", 15*time.Second, "how long one webhook attempt may take, the receiver's whole response included (connecting and TLS are bounded at 5s each within it)")
	fs.BoolVar(&f.allowPrivate, "webhook-allow-private", false, "let webhooks call loopback, private and link-local addresses (refused by default, checked as each connection is made)")
}

// configure gives cfg the webhook sender's configuration, with
// cfg.Metrics'. The store's matcher links to --public-url
// (assembly.Config.PublicURL).
func (f *webhookFlags) configure(cfg *server.Config, log *slog.Logger) {
	cfg.Webhooks = &server.Webhooks{AllowPrivate: f.allowPrivate, Send: &webhook.Config{
		Client:   webhook.NewClient(f.allowPrivate, webhook.Timeouts{Response: f.timeout, Connect: min(5*time.Second, f.timeout), TLS: min(5*time.Second, f.timeout)}),
		RetryFor: f.retryFor, Logger: log, Metrics: cfg.Metrics.Webhooks(),
	}}
}

// webhookOptions are the flags of rein webhook create.
type webhookOptions struct {
	url, secretFile, format string
	events, statuses        []string
	labels                  []string
}

func newWebhookCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use: "webhook",
		Example: `  rein webhook create oncall --url https://hooks.example.com/rein --status needs_approval,needs_input --secret-file oncall.secret
  rein webhook deliveries oncall --failed
  rein webhook redeliver oncall --failed`,
		Short: "Call a URL when runs change: create, list, get, pause, resume, delete, test, deliveries, redeliver",
		Long: `A webhook subscription POSTs a signed JSON body (Standard Webhooks) to its URL
for each status change or event of your tenant's runs that it chooses. What
it must send is stored with the event that causes it, sent at least once, in
order per run, with a stable webhook-id, and retried with backoff; rein serve
sends it. See docs/webhooks.md.`,
	}
	o := &webhookOptions{}
	create := &cobra.Command{
		Use:   "create NAME --url URL --secret-file FILE",
		Short: "Create a subscription",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			w, err := o.webhook(args[0])
			if err != nil {
				return err
			}
			return webhookCall(cmd.Context(), e, func(ctx context.Context, cn *conn) (any, error) {
				resp, err := cn.Webhooks.CreateWebhook(ctx, &reinv1.CreateWebhookRequest{Webhook: w})
				return protoJSON(resp.GetWebhook()), err
			})
		},
	}
	cf := create.Flags()
	cf.StringVar(&o.url, "url", "", "where deliveries are POSTed (http or https); required")
	cf.StringSliceVar(&o.events, "events", nil, "event kinds to deliver (approval_requested, tool_returned, …), comma-separated")
	cf.StringSliceVar(&o.statuses, "status", nil, "statuses whose entry is delivered: needs_approval, needs_input, needs_budget, running, ended (every terminal status) or a terminal one; default: every status change when --events is not given either")
	cf.StringSliceVar(&o.labels, "labels", nil, "only runs whose contract carries these labels, k=v, comma-separated")
	cf.StringVar(&o.secretFile, "secret-file", "", "a file holding the signing secret, whsec_ then base64; a second line while rotating (both sign); required")
	cf.StringVar(&o.format, "format", "standard", "the body: standard (JSON, Standard Webhooks), slack (a Block Kit message with Approve and Deny) or teams (a Microsoft Teams Adaptive Card linking to the console)")
	_ = create.MarkFlagRequired("url")
	_ = create.MarkFlagRequired("secret-file")

	list := &cobra.Command{Use: "list", Short: "List your tenant's subscriptions", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var resp *reinv1.ListWebhooksResponse
			return webhookRead(cmd.Context(), e, func(ctx context.Context, cn *conn) (err error) {
				resp, err = cn.Webhooks.ListWebhooks(ctx, &reinv1.ListWebhooksRequest{})
				return err
			}, func() error {
				if e.json {
					for _, w := range resp.GetWebhooks() {
						if err := writeJSON(e.stdout, protoJSON(w), false); err != nil {
							return err
						}
					}
					return nil
				}
				t := tabwriter.NewWriter(e.stdout, 0, 2, 2, ' ', 0)
				fmt.Fprintln(t, "NAME\tURL\tFORMAT\tSTATE\tCHOOSES")
				for _, w := range resp.GetWebhooks() {
					state := "active"
					if w.GetPaused() {
						state = "paused: " + w.GetPausedReason()
					}
					fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\n", w.GetName(), w.GetUrl(), formatName(w.GetFormat()), state, chooses(w))
				}
				return t.Flush()
			})
		}}
	byName := func(use, short string, call func(ctx context.Context, cn *conn, name string) (any, error)) *cobra.Command {
		return &cobra.Command{Use: use + " NAME", Short: short, Args: cobra.ExactArgs(1), RunE: func(cmd *cobra.Command, args []string) error {
			return webhookCall(cmd.Context(), e, func(ctx context.Context, cn *conn) (any, error) { return call(ctx, cn, args[0]) })
		}}
	}
	get := byName("get", "Show a subscription (its secrets by fingerprint) and how many deliveries wait", func(ctx context.Context, cn *conn, name string) (any, error) {
		resp, err := cn.Webhooks.GetWebhook(ctx, &reinv1.GetWebhookRequest{Name: name})
		return protoJSON(resp), err
	})
	pause := byName("pause", "Pause a subscription: its deliveries wait", func(ctx context.Context, cn *conn, name string) (any, error) {
		resp, err := cn.Webhooks.PauseWebhook(ctx, &reinv1.PauseWebhookRequest{Name: name})
		return protoJSON(resp.GetWebhook()), err
	})
	resume := byName("resume", "Resume a subscription; its failed deliveries are sent again", func(ctx context.Context, cn *conn, name string) (any, error) {
		resp, err := cn.Webhooks.ResumeWebhook(ctx, &reinv1.ResumeWebhookRequest{Name: name})
		return protoJSON(resp.GetWebhook()), err
	})
	del := byName("delete", "Delete a subscription and what it had still to send", func(ctx context.Context, cn *conn, name string) (any, error) {
		_, err := cn.Webhooks.DeleteWebhook(ctx, &reinv1.DeleteWebhookRequest{Name: name})
		return nil, err
	})
	test := byName("test", "Send a signed test delivery now and show how the receiver answered", func(ctx context.Context, cn *conn, name string) (any, error) {
		resp, err := cn.Webhooks.TestWebhook(ctx, &reinv1.TestWebhookRequest{Name: name})
		return protoJSON(resp), err
	})
	var failedOnly bool
	var limit uint32
	deliveries := &cobra.Command{Use: "deliveries NAME", Short: "List a subscription's deliveries waiting or failed, oldest first", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var resp *reinv1.ListWebhookDeliveriesResponse
			return webhookRead(cmd.Context(), e, func(ctx context.Context, cn *conn) (err error) {
				resp, err = cn.Webhooks.ListWebhookDeliveries(ctx, &reinv1.ListWebhookDeliveriesRequest{Name: args[0], Failed: failedOnly, Limit: limit})
				return err
			}, func() error {
				if e.json {
					for _, d := range resp.GetDeliveries() {
						if err := writeJSON(e.stdout, protoJSON(d), false); err != nil {
							return err
						}
					}
					return nil
				}
				t := tabwriter.NewWriter(e.stdout, 0, 2, 2, ' ', 0)
				fmt.Fprintln(t, "ID\tTYPE\tSTATE\tATTEMPTS\tLAST ERROR")
				for _, d := range resp.GetDeliveries() {
					state := strings.ToLower(strings.TrimPrefix(d.GetState().String(), "WEBHOOK_DELIVERY_STATE_"))
					fmt.Fprintf(t, "%s\t%s\t%s\t%d\t%s\n", d.GetId(), d.GetType(), state, d.GetAttempts(), d.GetLastError())
				}
				return t.Flush()
			})
		}}
	deliveries.Flags().BoolVar(&failedOnly, "failed", false, "only the deliveries that failed for longer than the server retries")
	deliveries.Flags().Uint32Var(&limit, "limit", 100, "at most this many (up to 1000)")
	var redeliverFailed bool
	redeliver := &cobra.Command{Use: "redeliver NAME [DELIVERY_ID] [--failed]", Short: "Send a delivery again, or every failed one, with the same id; resumes the subscription",
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &reinv1.RedeliverWebhookRequest{Name: args[0], Failed: redeliverFailed}
			if len(args) == 2 {
				req.DeliveryId = args[1]
			}
			if (req.DeliveryId == "") == !redeliverFailed {
				return usageError("rein webhook redeliver: give a DELIVERY_ID or --failed, one of them")
			}
			return webhookCall(cmd.Context(), e, func(ctx context.Context, cn *conn) (any, error) {
				resp, err := cn.Webhooks.RedeliverWebhook(ctx, req)
				return protoJSON(resp), err
			})
		}}
	redeliver.Flags().BoolVar(&redeliverFailed, "failed", false, "every failed delivery of the subscription")
	for _, c := range []*cobra.Command{create, list, get, pause, resume, del, test, deliveries, redeliver} {
		e.commandTimeoutFlag(c)
		cmd.AddCommand(c)
	}
	return cmd
}

// webhook is the subscription the create flags describe.
func (o *webhookOptions) webhook(name string) (*reinv1.Webhook, error) {
	w := &reinv1.Webhook{Name: name, Url: o.url, EventKinds: o.events}
	switch o.format {
	case "standard":
		w.Format = reinv1.WebhookFormat_WEBHOOK_FORMAT_STANDARD
	case "slack":
		w.Format = reinv1.WebhookFormat_WEBHOOK_FORMAT_SLACK
	case "teams":
		w.Format = reinv1.WebhookFormat_WEBHOOK_FORMAT_TEAMS
	default:
		return nil, usageError("--format %q: give standard, slack or teams", o.format)
	}
	for _, s := range o.statuses {
		if s == "ended" {
			for v := range reinv1.RunStatus_name {
				if st := reinv1.RunStatus(v); runstate.Terminal(st) && !slices.Contains(w.Statuses, st) {
					w.Statuses = append(w.Statuses, st)
				}
			}
			continue
		}
		v, ok := reinv1.RunStatus_value["RUN_STATUS_"+strings.ToUpper(s)]
		if !ok || v == 0 {
			return nil, usageError("--status %q: give needs_approval, needs_input, needs_budget, running, queued, ended, completed, failed, denied, expired, budget_exhausted or cancelled", s)
		}
		if !slices.Contains(w.Statuses, reinv1.RunStatus(v)) {
			w.Statuses = append(w.Statuses, reinv1.RunStatus(v))
		}
	}
	slices.Sort(w.Statuses)
	if len(o.labels) > 0 {
		w.Labels = map[string]string{}
		for _, kv := range o.labels {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return nil, usageError("--labels %q: give key=value", kv)
			}
			w.Labels[k] = v
		}
	}
	data, err := os.ReadFile(o.secretFile)
	if err != nil {
		return nil, usageError("--secret-file: %v", err)
	}
	for line := range strings.Lines(string(data)) {
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		if _, err := webhook.ParseSecret(line); err != nil {
			return nil, usageError("--secret-file %s: %v", o.secretFile, err)
		}
		w.Secrets = append(w.Secrets, line)
	}
	if len(w.Secrets) == 0 || len(w.Secrets) > 2 {
		return nil, usageError("--secret-file %s holds %d secrets: give one, or two while rotating", o.secretFile, len(w.Secrets))
	}
	return w, nil
}

func formatName(f reinv1.WebhookFormat) string {
	return strings.ToLower(strings.TrimPrefix(f.String(), "WEBHOOK_FORMAT_"))
}

// chooses says what a subscription delivers, for the list.
func chooses(w *reinv1.Webhook) string {
	var parts []string
	for _, s := range w.GetStatuses() {
		parts = append(parts, webhook.StatusName(s))
	}
	parts = append(parts, w.GetEventKinds()...)
	if len(parts) == 0 {
		return "every status change"
	}
	return strings.Join(parts, ",")
}

// webhookCall makes call (retried while the server is unavailable) and
// prints what it returns, if anything.
func webhookCall(ctx context.Context, e *env, call func(ctx context.Context, cn *conn) (any, error)) error {
	var out any
	if err := webhookRead(ctx, e, func(ctx context.Context, cn *conn) (err error) {
		out, err = call(ctx, cn)
		return err
	}, func() error { return nil }); err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	return writeJSON(e.stdout, out, !e.json)
}

// webhookRead connects (--server, or the embedded server on --db), makes
// call and then print.
func webhookRead(ctx context.Context, e *env, call func(ctx context.Context, cn *conn) error, print func() error) error {
	cn, err := connect(ctx, &e.target, e.stderr, nil)
	if err != nil {
		return err
	}
	defer cn.close()
	if err := cn.retry(ctx, func(ctx context.Context) error { return call(ctx, cn) }); err != nil {
		return err
	}
	return print()
}
