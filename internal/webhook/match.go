package webhook

import (
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/runstate"
	"github.com/reinhq/rein/internal/secret"
	"github.com/reinhq/rein/internal/store"
)

// Matcher makes the deliveries of each append (store.Outbox). Its fields
// do not change once the store has it.
type Matcher struct {
	// PublicURL is where people reach the console (rein serve
	// --public-url); a pause's body links to the run there. "" links
	// nothing.
	PublicURL string
	// Secrets are redacted from every body; nil redacts nothing.
	Secrets *secret.Redactor
}

// Outbox is m as the store calls it.
func (m *Matcher) Outbox() store.Outbox { return m.Match }

// Match implements store.Outbox: for each subscription and each event of
// the append that the subscription chooses, one delivery, in the order of
// the events. A subscription chooses a status change to one of its
// statuses, and an event of one of its kinds; with neither set, every
// status change. A paused subscription still gets its deliveries: they
// wait for its resume.
func (m *Matcher) Match(subs []*reinv1.Webhook, before, after *runstate.State, events []*reinv1.Event) []*reinv1.WebhookDelivery {
	var out []*reinv1.WebhookDelivery
	status := before.Status
	for _, ev := range events {
		kind := Kind(ev)
		prev := status
		changed := false
		switch {
		case ev.GetStatusChanged() != nil:
			status, changed = ev.GetStatusChanged().GetTo(), true
		case ev.GetRunStarted() != nil:
			status, changed = reinv1.RunStatus_RUN_STATUS_RUNNING, true
			if ev.GetRunStarted().GetQueued() {
				status = reinv1.RunStatus_RUN_STATUS_QUEUED
			}
		}
		bodies := map[string][]byte{} // by type: the subscriptions share them
		for _, w := range subs {
			if !labelsMatch(w, after) {
				continue
			}
			typ := ""
			switch {
			case changed && chooses(w, status):
				typ = "run." + StatusName(status)
			case slices.Contains(w.GetEventKinds(), kind):
				typ = "event." + kind
			default:
				continue
			}
			body, ok := bodies[typ]
			if !ok {
				body = m.body(typ, kind, ev, prev, status, after)
				bodies[typ] = body
			}
			out = append(out, &reinv1.WebhookDelivery{
				Id:        DeliveryID(w.GetName(), after.RunID, ev.GetSequence()),
				Webhook:   w.GetName(),
				Tenant:    after.Tenant,
				RunId:     after.RunID,
				Sequence:  ev.GetSequence(),
				Type:      typ,
				State:     reinv1.WebhookDeliveryState_WEBHOOK_DELIVERY_STATE_PENDING,
				CreatedAt: timestamppb.New(eventTime(ev, after)),
				Body:      body,
			})
		}
	}
	return out
}

// chooses reports whether w delivers a change to status.
func chooses(w *reinv1.Webhook, status reinv1.RunStatus) bool {
	if len(w.GetStatuses()) == 0 {
		return len(w.GetEventKinds()) == 0
	}
	return slices.Contains(w.GetStatuses(), status)
}

func labelsMatch(w *reinv1.Webhook, st *runstate.State) bool {
	labels := st.Contract.GetLabels()
	for k, v := range w.GetLabels() {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// DeliveryID is a delivery's stable id, the webhook-id header: the same at
// every attempt and after every restart.
func DeliveryID(webhook, runID string, seq uint64) string {
	return fmt.Sprintf("msg_%s_%s_%d", webhook, runID, seq)
}

// Kind is an event's kind: the name of its payload's field
// ("approval_requested").
func Kind(ev *reinv1.Event) string {
	m := ev.ProtoReflect()
	fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("payload"))
	if fd == nil {
		return "unknown"
	}
	return string(fd.Name())
}

// StatusName is a status as the API's JSON and the CLI write it, without
// its prefix: "needs_approval".
func StatusName(s reinv1.RunStatus) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "RUN_STATUS_"))
}
