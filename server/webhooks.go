package server

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/auth"
	"github.com/reinhq/rein/internal/store"
	"github.com/reinhq/rein/internal/storeformat"
	"github.com/reinhq/rein/internal/webhook"
)

// Webhooks configures a node's webhook subscriptions (Config.Webhooks).
type Webhooks struct {
	// Send, when set, configures the sender the node runs while it
	// serves, on its store (Send.Store is set by the node; a nil
	// Send.Slack is slackapp.Delivery, the Block Kit message). The store
	// must have been opened with a webhook.Matcher's Outbox.
	Send *webhook.Config
	// AllowPrivate accepts URLs on loopback and private addresses (rein
	// serve --webhook-allow-private).
	AllowPrivate bool
	// Lead, when set, is how the node learns it sends, when several
	// share the store: the node runs its sender only while it leads
	// (webhook_lead.go).
	Lead Lead
	// Follow, when set, calls wake each time another server's commit put
	// a delivery in the outbox, until ctx ends; the leader runs it, so
	// that it sends those at once rather than at its next poll.
	Follow func(ctx context.Context, wake func())
	// NeedFormat, when set, is the store format subscriptions need on
	// this store, and NeedFormatOn names the store: CreateWebhook is
	// refused (FailedPrecondition) until the node's gate allows it.
	NeedFormat   storeformat.Format
	NeedFormatOn string
}

// webhookService implements WebhookService over the store's
// subscriptions: a handler validates, makes one store call, maps the
// error.
type webhookService struct {
	reinv1.UnsafeWebhookServiceServer
	store  store.Webhooks
	cfg    *Webhooks
	sender *webhook.Sender   // nil when the node sends nothing
	gate   *storeformat.Gate // nil without a Cluster
	log    *slog.Logger
	clock  func() time.Time
	tenant func(context.Context) auth.Principal
}

var _ reinv1.WebhookServiceServer = (*webhookService)(nil)

// public is w as the API gives it: its secrets replaced by their
// fingerprints.
func public(w *reinv1.Webhook) *reinv1.Webhook {
	w = proto.CloneOf(w)
	w.SecretFingerprints = w.SecretFingerprints[:0]
	for _, s := range w.GetSecrets() {
		w.SecretFingerprints = append(w.SecretFingerprints, webhook.Fingerprint(s))
	}
	w.Secrets = nil
	return w
}

func (s *webhookService) CreateWebhook(ctx context.Context, req *reinv1.CreateWebhookRequest) (*reinv1.CreateWebhookResponse, error) {
	if need := s.cfg.NeedFormat; need != 0 && (s.gate == nil || !s.gate.Allows("webhooks", need)) {
		return nil, status.Errorf(codes.FailedPrecondition, "webhooks on %s need store format %d; finalize with rein cluster finalize once every replica runs this build",
			s.cfg.NeedFormatOn, need)
	}
	id := s.tenant(ctx)
	w := proto.CloneOf(req.GetWebhook())
	if err := webhook.CheckURL(w.GetUrl(), s.cfg.AllowPrivate); err != nil {
		return nil, invalidArgument("webhook.url", err.Error())
	}
	if len(w.GetSecrets()) == 0 {
		return nil, invalidArgument("webhook.secrets", "a webhook needs a signing secret, whsec_ then its key in base64 (rein webhook create --secret-file)")
	}
	for i, sec := range w.GetSecrets() {
		if _, err := webhook.ParseSecret(sec); err != nil {
			return nil, invalidArgument(fmt.Sprintf("webhook.secrets[%d]", i), err.Error())
		}
	}
	if w.Format == reinv1.WebhookFormat_WEBHOOK_FORMAT_UNSPECIFIED {
		w.Format = reinv1.WebhookFormat_WEBHOOK_FORMAT_STANDARD
	}
	w.Tenant, w.CreatedBy, w.CreatedAt = id.Tenant, id.ID, timestamppb.New(s.clock())
	w.Paused, w.PausedReason, w.SecretFingerprints = false, "", nil
	if err := s.store.CreateWebhook(ctx, w); err != nil {
		return nil, toStatus(s.log, "CreateWebhook", err)
	}
	return &reinv1.CreateWebhookResponse{Webhook: public(w)}, nil
}

func (s *webhookService) ListWebhooks(ctx context.Context, _ *reinv1.ListWebhooksRequest) (*reinv1.ListWebhooksResponse, error) {
	all, err := s.store.ListWebhooks(ctx, s.tenant(ctx).Tenant)
	if err != nil {
		return nil, toStatus(s.log, "ListWebhooks", err)
	}
	out := &reinv1.ListWebhooksResponse{}
	for _, w := range all {
		out.Webhooks = append(out.Webhooks, public(w))
	}
	return out, nil
}

// find is the caller's tenant's subscription name, secrets included.
func (s *webhookService) find(ctx context.Context, name, method string) (*reinv1.Webhook, error) {
	all, err := s.store.ListWebhooks(ctx, s.tenant(ctx).Tenant)
	if err != nil {
		return nil, toStatus(s.log, method, err)
	}
	for _, w := range all {
		if w.GetName() == name {
			return w, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "webhook %q not found; rein webhook list shows the tenant's", name)
}

func (s *webhookService) GetWebhook(ctx context.Context, req *reinv1.GetWebhookRequest) (*reinv1.GetWebhookResponse, error) {
	w, err := s.find(ctx, req.GetName(), "GetWebhook")
	if err != nil {
		return nil, err
	}
	ds, err := s.store.Deliveries(ctx, w.GetTenant(), w.GetName(), maxListedDeliveries)
	if err != nil {
		return nil, toStatus(s.log, "GetWebhook", err)
	}
	out := &reinv1.GetWebhookResponse{Webhook: public(w)}
	for _, d := range ds {
		if d.GetState() == reinv1.WebhookDeliveryState_WEBHOOK_DELIVERY_STATE_FAILED {
			out.Failed++
		} else {
			out.Pending++
		}
	}
	return out, nil
}

// maxListedDeliveries bounds what GetWebhook counts and
// ListWebhookDeliveries reads.
const maxListedDeliveries = 10000

func (s *webhookService) update(ctx context.Context, name, method string, f func(*reinv1.Webhook)) (*reinv1.Webhook, error) {
	w, err := s.store.UpdateWebhook(ctx, s.tenant(ctx).Tenant, name, func(w *reinv1.Webhook) error { f(w); return nil })
	if err != nil {
		return nil, toStatus(s.log, method, err)
	}
	if s.sender != nil {
		s.sender.Wake()
	}
	return public(w), nil
}

func (s *webhookService) PauseWebhook(ctx context.Context, req *reinv1.PauseWebhookRequest) (*reinv1.PauseWebhookResponse, error) {
	who := s.tenant(ctx).ID
	w, err := s.update(ctx, req.GetName(), "PauseWebhook", func(w *reinv1.Webhook) {
		w.Paused, w.PausedReason = true, "paused by "+who
	})
	if err != nil {
		return nil, err
	}
	return &reinv1.PauseWebhookResponse{Webhook: w}, nil
}

func (s *webhookService) ResumeWebhook(ctx context.Context, req *reinv1.ResumeWebhookRequest) (*reinv1.ResumeWebhookResponse, error) {
	if _, err := s.requeue(ctx, req.GetName(), "", true, "ResumeWebhook"); err != nil {
		return nil, err
	}
	w, err := s.update(ctx, req.GetName(), "ResumeWebhook", func(w *reinv1.Webhook) { w.Paused, w.PausedReason = false, "" })
	if err != nil {
		return nil, err
	}
	return &reinv1.ResumeWebhookResponse{Webhook: w}, nil
}

func (s *webhookService) DeleteWebhook(ctx context.Context, req *reinv1.DeleteWebhookRequest) (*reinv1.DeleteWebhookResponse, error) {
	if err := s.store.DeleteWebhook(ctx, s.tenant(ctx).Tenant, req.GetName()); err != nil {
		return nil, toStatus(s.log, "DeleteWebhook", err)
	}
	return &reinv1.DeleteWebhookResponse{}, nil
}

func (s *webhookService) TestWebhook(ctx context.Context, req *reinv1.TestWebhookRequest) (*reinv1.TestWebhookResponse, error) {
	w, err := s.find(ctx, req.GetName(), "TestWebhook")
	if err != nil {
		return nil, err
	}
	if s.sender == nil {
		return nil, status.Error(codes.FailedPrecondition, "this server sends no webhooks: test the subscription on rein serve (--server)")
	}
	now := s.clock()
	id := fmt.Sprintf("msg_%s_test_%d", w.GetName(), now.UnixNano())
	body := fmt.Appendf(nil, `{"type":"webhook.test","timestamp":%q,"data":{"tenant":%q,"webhook":%q}}`,
		now.UTC().Format(time.RFC3339Nano), w.GetTenant(), w.GetName())
	a := s.sender.Send(ctx, w, &reinv1.WebhookDelivery{Id: id, Webhook: w.GetName(), Tenant: w.GetTenant(), Type: "webhook.test", Body: body, CreatedAt: timestamppb.New(now)})
	out := &reinv1.TestWebhookResponse{Id: id, StatusCode: int32(a.Status)}
	if a.Err != nil {
		out.Error = a.Err.Error()
	}
	return out, nil
}

func (s *webhookService) ListWebhookDeliveries(ctx context.Context, req *reinv1.ListWebhookDeliveriesRequest) (*reinv1.ListWebhookDeliveriesResponse, error) {
	w, err := s.find(ctx, req.GetName(), "ListWebhookDeliveries")
	if err != nil {
		return nil, err
	}
	limit := int(req.GetLimit())
	if limit == 0 {
		limit = 100
	}
	ds, err := s.store.Deliveries(ctx, w.GetTenant(), w.GetName(), maxListedDeliveries)
	if err != nil {
		return nil, toStatus(s.log, "ListWebhookDeliveries", err)
	}
	out := &reinv1.ListWebhookDeliveriesResponse{}
	for _, d := range ds {
		if len(out.Deliveries) == limit {
			break
		}
		if req.GetFailed() && d.GetState() != reinv1.WebhookDeliveryState_WEBHOOK_DELIVERY_STATE_FAILED {
			continue
		}
		d.Body = nil
		out.Deliveries = append(out.Deliveries, d)
	}
	return out, nil
}

func (s *webhookService) RedeliverWebhook(ctx context.Context, req *reinv1.RedeliverWebhookRequest) (*reinv1.RedeliverWebhookResponse, error) {
	if (req.GetDeliveryId() == "") == !req.GetFailed() {
		return nil, invalidArgument("delivery_id", "give a delivery's id or failed, one of them")
	}
	n, err := s.requeue(ctx, req.GetName(), req.GetDeliveryId(), req.GetFailed(), "RedeliverWebhook")
	if err != nil {
		return nil, err
	}
	if req.GetDeliveryId() != "" && n == 0 {
		return nil, status.Errorf(codes.NotFound, "webhook %q has no delivery %q stored; rein webhook deliveries %s lists them", req.GetName(), req.GetDeliveryId(), req.GetName())
	}
	if _, err := s.update(ctx, req.GetName(), "RedeliverWebhook", func(w *reinv1.Webhook) { w.Paused, w.PausedReason = false, "" }); err != nil {
		return nil, err
	}
	return &reinv1.RedeliverWebhookResponse{Queued: uint32(n)}, nil
}

// requeue makes a delivery (id), or every failed one (failed), pending
// again, due now, its attempts counted afresh.
func (s *webhookService) requeue(ctx context.Context, name, id string, failed bool, method string) (int, error) {
	w, err := s.find(ctx, name, method)
	if err != nil {
		return 0, err
	}
	ds, err := s.store.Deliveries(ctx, w.GetTenant(), w.GetName(), maxListedDeliveries)
	if err != nil {
		return 0, toStatus(s.log, method, err)
	}
	n := 0
	for _, d := range ds {
		isFailed := d.GetState() == reinv1.WebhookDeliveryState_WEBHOOK_DELIVERY_STATE_FAILED
		if (id != "" && d.GetId() != id) || (id == "" && (!failed || !isFailed)) {
			continue
		}
		err := s.store.UpdateDelivery(ctx, d, func(got *reinv1.WebhookDelivery) (bool, error) {
			got.State = reinv1.WebhookDeliveryState_WEBHOOK_DELIVERY_STATE_PENDING
			got.NextAttemptAt, got.FirstAttemptAt, got.Attempts = nil, nil, 0
			return false, nil
		})
		if err != nil {
			return n, toStatus(s.log, method, err)
		}
		n++
	}
	return n, nil
}
