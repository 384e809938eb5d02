package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/metrics"
	"github.com/reinhq/rein/internal/store"
)

// Format renders a delivery in a format other than the standard one (a
// Slack message, internal/slackapp): the body to POST and its content
// type. The body is signed like a standard one.
type Format func(d *reinv1.WebhookDelivery) (body []byte, contentType string, err error)

// ErrNoFormat: a subscription's format is not built into this server.
var ErrNoFormat = errors.New("webhook format is not built into this server")

// Config configures a Sender.
type Config struct {
	// Store holds the subscriptions and their outbox; required.
	Store store.Webhooks
	// Client makes the attempts; nil means NewClient(false, Timeouts{}).
	Client *http.Client
	// RetryFor is how long a delivery is retried after its first attempt
	// before it fails and its subscription is paused; 0 means 24h.
	RetryFor time.Duration
	// Workers bounds the attempts in flight; 0 means 16.
	Workers int
	// Poll is how often the outbox is read when nothing woke the sender;
	// 0 means 500ms.
	Poll time.Duration
	// Slack renders WEBHOOK_FORMAT_SLACK deliveries; nil refuses them
	// (ErrNoFormat), and they are retried until it is wired or they fail.
	Slack Format
	// Sends, when set, says whether this server sends a subscription's
	// deliveries (servers sharing a store each send some); nil sends all.
	Sends func(tenant, name string) bool
	// Clock is the sender's clock; nil means time.Now.
	Clock   func() time.Time
	Logger  *slog.Logger
	Metrics *metrics.Webhooks
}

// Sender sends the outbox's deliveries: at least once, each run's in the
// order of its events (a run's next delivery to a subscription waits until
// the one before it was taken), with exponential backoff and jitter
// between the attempts of one delivery, at most Workers at once. A
// receiver slows only its own deliveries, never a run: the sender reads
// the outbox the runs' appends filled and writes back only the
// deliveries' outcomes.
type Sender struct {
	cfg  Config
	wake chan struct{}
	sem  chan struct{}

	// mu guards inflight, the deliveries claimed by id (an attempt is out
	// for them, or they were taken and wait for removal), and delivered,
	// those taken that the next scan removes.
	mu        sync.Mutex
	inflight  map[string]bool
	delivered []*reinv1.WebhookDelivery
	wg        sync.WaitGroup
}

// NewSender makes a Sender; Run starts it.
func NewSender(cfg Config) *Sender {
	if cfg.Client == nil {
		cfg.Client = NewClient(false, Timeouts{})
	}
	if cfg.RetryFor == 0 {
		cfg.RetryFor = 24 * time.Hour
	}
	if cfg.Workers == 0 {
		cfg.Workers = 16
	}
	if cfg.Poll == 0 {
		cfg.Poll = 500 * time.Millisecond
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Sender{cfg: cfg, wake: make(chan struct{}, 1), sem: make(chan struct{}, cfg.Workers), inflight: map[string]bool{}}
}

// Wake makes the sender read the outbox now (an append put deliveries in
// it, a subscription was resumed). It never blocks.
func (s *Sender) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// minScan is the least time between two reads of the outbox: a busy
// server's commits wake the sender far more often, and one read serves
// them all.
const minScan = 20 * time.Millisecond

// Run sends until ctx ends, then waits for the attempts in flight.
func (s *Sender) Run(ctx context.Context) {
	defer func() {
		s.wg.Wait()
		// What was taken since the last scan leaves the outbox now, or is
		// sent again after the restart (at least once).
		s.mu.Lock()
		done := s.delivered
		s.delivered = nil
		s.mu.Unlock()
		if err := s.cfg.Store.RemoveDeliveries(context.WithoutCancel(ctx), done); err != nil {
			s.cfg.Logger.Warn("webhook: remove delivered webhooks at stop; they will be sent again", "count", len(done), "err", err)
		}
		// Released either way, so that a Run again (a server that leads
		// again) sends what is still in the outbox.
		for _, d := range done {
			s.release(d.GetId())
		}
	}()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.wake:
		}
		if err := s.scan(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("webhook: read the outbox", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(minScan):
		}
		t.Reset(s.cfg.Poll)
	}
}

// scanLimit bounds the runs whose head is read of one subscription per
// scan.
const scanLimit = 10000

// scan removes what was delivered since the last, then starts an attempt
// for the head of each run's queue that is due.
func (s *Sender) scan(ctx context.Context) error {
	s.mu.Lock()
	done := s.delivered
	s.delivered = nil
	s.mu.Unlock()
	if err := s.cfg.Store.RemoveDeliveries(ctx, done); err != nil {
		// Kept claimed: they are removed at the next scan, never sent
		// again by this server meanwhile.
		s.mu.Lock()
		s.delivered = append(s.delivered, done...)
		s.mu.Unlock()
		return fmt.Errorf("remove delivered webhooks from the outbox: %w", err)
	}
	for _, d := range done {
		s.release(d.GetId())
	}
	subs, err := s.cfg.Store.ListWebhooks(ctx, "")
	if err != nil {
		return err
	}
	now := s.cfg.Clock()
	depths := make(map[[2]string]int, len(subs))
	for _, w := range subs {
		queues, queued, err := s.cfg.Store.DeliveryHeads(ctx, w.GetTenant(), w.GetName(), scanLimit, perRun)
		if err != nil {
			return err
		}
		depths[[2]string{w.GetTenant(), w.GetName()}] = queued
		if w.GetPaused() || (s.cfg.Sends != nil && !s.cfg.Sends(w.GetTenant(), w.GetName())) {
			continue
		}
		for _, q := range queues {
			d := q[0]
			if d.GetState() != reinv1.WebhookDeliveryState_WEBHOOK_DELIVERY_STATE_PENDING {
				continue
			}
			if next := d.GetNextAttemptAt(); next != nil && next.AsTime().After(now) {
				continue
			}
			// The run's head is claimed for the whole queue: one attempt
			// goroutine per run at a time.
			if !s.claim(d.GetId()) {
				continue
			}
			select {
			case s.sem <- struct{}{}:
			case <-ctx.Done():
				s.release(d.GetId())
				return nil
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer func() { <-s.sem; s.Wake() }()
				s.sendQueue(ctx, w, q)
			}()
		}
	}
	s.cfg.Metrics.Depths(depths)
	return nil
}

// perRun is how many of a run's deliveries one attempt goroutine sends,
// one after the other, before the next scan.
const perRun = 64

// sendQueue sends q, a run's deliveries in order from its head, one after
// the other, and stops at the first that is not taken (it is retried, the
// rest wait behind it) or that is not yet due.
func (s *Sender) sendQueue(ctx context.Context, w *reinv1.Webhook, q []*reinv1.WebhookDelivery) {
	for i, d := range q {
		if i > 0 && (d.GetState() != reinv1.WebhookDeliveryState_WEBHOOK_DELIVERY_STATE_PENDING || d.GetNextAttemptAt() != nil || !s.claim(d.GetId())) {
			break
		}
		if !s.deliver(ctx, w, d) {
			s.release(d.GetId())
			break
		}
	}
}

func (s *Sender) claim(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inflight[id] {
		return false
	}
	s.inflight[id] = true
	return true
}

func (s *Sender) release(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.inflight, id)
}

// Attempt is how one attempt went.
type Attempt struct {
	// Status is the receiver's HTTP status; 0 when none came.
	Status int
	// RetryAfter is the receiver's Retry-After; 0 when it gave none.
	RetryAfter time.Duration
	// Err is what went wrong; nil on a 2xx.
	Err error
}

// deliver makes one attempt at d and stores its outcome: a delivery
// taken is queued for removal (the next scan removes it, with the others
// taken since, in one commit) and deliver reports true; else it is retried
// later, or failed (and its subscription paused) past RetryFor.
func (s *Sender) deliver(ctx context.Context, w *reinv1.Webhook, d *reinv1.WebhookDelivery) bool {
	a := s.Send(ctx, w, d)
	if ctx.Err() != nil && a.Err != nil {
		return false // stopping: the delivery stays as it was, and is sent again
	}
	now := s.cfg.Clock()
	if a.Err == nil {
		s.cfg.Metrics.Attempted("delivered")
		s.cfg.Metrics.Delivered(now.Sub(d.GetCreatedAt().AsTime()))
		s.mu.Lock()
		s.delivered = append(s.delivered, d)
		s.mu.Unlock()
		return true
	}
	gaveUp := false
	err := s.cfg.Store.UpdateDelivery(ctx, d, func(got *reinv1.WebhookDelivery) (bool, error) {
		got.Attempts++
		if got.FirstAttemptAt == nil {
			got.FirstAttemptAt = timestamppb.New(now)
		}
		got.LastAttemptAt = timestamppb.New(now)
		got.LastStatusCode = int32(a.Status)
		got.LastError = a.Err.Error()
		if now.Sub(got.GetFirstAttemptAt().AsTime()) >= s.cfg.RetryFor {
			got.State = reinv1.WebhookDeliveryState_WEBHOOK_DELIVERY_STATE_FAILED
			got.NextAttemptAt = nil
			gaveUp = true
			return false, nil
		}
		got.NextAttemptAt = timestamppb.New(now.Add(Backoff(int(got.Attempts), a.RetryAfter, rand.Float64)))
		return false, nil
	})
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			s.cfg.Logger.Warn("webhook: store an attempt's outcome", "webhook", w.GetName(), "id", d.GetId(), "err", err)
		}
		return false
	}
	outcome := "failed"
	if gaveUp {
		outcome = "gave_up"
	}
	s.cfg.Metrics.Attempted(outcome)
	s.cfg.Logger.Warn("webhook delivery failed", "webhook", w.GetName(), "tenant", w.GetTenant(), "id", d.GetId(),
		"run", d.GetRunId(), "attempt", d.GetAttempts()+1, "status", a.Status, "err", a.Err, "gave_up", gaveUp)
	if gaveUp {
		reason := fmt.Sprintf("delivery %s failed for longer than %s: %v; see rein webhook deliveries %s --failed, then rein webhook redeliver %s --failed",
			d.GetId(), s.cfg.RetryFor, a.Err, w.GetName(), w.GetName())
		if _, err := s.cfg.Store.UpdateWebhook(ctx, w.GetTenant(), w.GetName(), func(sub *reinv1.Webhook) error {
			sub.Paused, sub.PausedReason = true, reason
			return nil
		}); err != nil && !errors.Is(err, store.ErrNotFound) {
			s.cfg.Logger.Warn("webhook: pause a failing subscription", "webhook", w.GetName(), "err", err)
		}
	}
	return false
}

// Send makes one signed attempt at d to w's URL, now, and says how it
// went. It stores nothing.
func (s *Sender) Send(ctx context.Context, w *reinv1.Webhook, d *reinv1.WebhookDelivery) Attempt {
	body, ctype := d.GetBody(), "application/json"
	switch w.GetFormat() {
	case reinv1.WebhookFormat_WEBHOOK_FORMAT_SLACK:
		if s.cfg.Slack == nil {
			return Attempt{Err: fmt.Errorf("webhook %s: the slack %w; it is retried until a server that has it sends it, or create the subscription with --format standard", w.GetName(), ErrNoFormat)}
		}
		var err error
		if body, ctype, err = s.cfg.Slack(d); err != nil {
			return Attempt{Err: fmt.Errorf("webhook %s: render for slack: %w", w.GetName(), err)}
		}
	case reinv1.WebhookFormat_WEBHOOK_FORMAT_TEAMS:
		var err error
		if body, ctype, err = Teams(d); err != nil {
			return Attempt{Err: fmt.Errorf("webhook %s: render for teams: %w", w.GetName(), err)}
		}
	}
	ts := s.cfg.Clock().Unix()
	sig, err := Sign(w.GetSecrets(), d.GetId(), ts, body)
	if err != nil {
		return Attempt{Err: err}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.GetUrl(), bytes.NewReader(body))
	if err != nil {
		return Attempt{Err: err}
	}
	req.Header.Set("content-type", ctype)
	req.Header.Set("user-agent", "rein-webhooks/1")
	req.Header.Set("webhook-id", d.GetId())
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", sig)
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		return Attempt{Err: err}
	}
	defer resp.Body.Close()
	// Read (and drop) at most MaxResponseBytes, so the connection may be
	// kept; the client's timeout bounds the time it takes.
	_, rerr := io.Copy(io.Discard, io.LimitReader(resp.Body, MaxResponseBytes))
	a := Attempt{Status: resp.StatusCode, RetryAfter: retryAfter(resp.Header.Get("retry-after"), s.cfg.Clock())}
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		a.Err = fmt.Errorf("the receiver answered %s: rein follows no redirect; give the webhook its final URL", resp.Status)
	case resp.StatusCode < 200 || resp.StatusCode >= 300:
		a.Err = fmt.Errorf("the receiver answered %s", resp.Status)
	case rerr != nil:
		// A 2xx whose body did not arrive: the receiver took the
		// delivery, and it is not sent again.
		s.cfg.Logger.Debug("webhook: read a 2xx response's body", "webhook", w.GetName(), "err", rerr)
	}
	return a
}

// retryAfter reads a Retry-After header: seconds, or an HTTP date.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// Backoff bounds.
const (
	backoffBase = 5 * time.Second
	backoffMax  = time.Hour
	// maxRetryAfter bounds how long a receiver's Retry-After holds a
	// delivery back.
	maxRetryAfter = 6 * time.Hour
)

// Backoff is the wait before the next attempt after attempts failed
// ones: 5s doubled per attempt up to an hour, a random part of its second
// half taken off (jitter, rnd in [0,1)), and never less than the
// receiver's Retry-After (up to 6h).
func Backoff(attempts int, retryAfter time.Duration, rnd func() float64) time.Duration {
	d := backoffMax
	if attempts < 20 {
		d = min(backoffBase<<max(attempts-1, 0), backoffMax)
	}
	d = d/2 + time.Duration(rnd()*float64(d/2))
	return max(d, min(retryAfter, maxRetryAfter))
}
