package server

// WebhookService on the etcd store: subscriptions wait for the store
// format that knows them, and a pause is delivered through the sender the
// node runs while it leads.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
	"github.com/reinhq/rein/internal/etcdtest"
	etcdstore "github.com/reinhq/rein/internal/store/etcd"
	"github.com/reinhq/rein/internal/storeformat"
	"github.com/reinhq/rein/internal/webhook"
)

// etcdWebhookServer is a people server on an etcd store with the outbox,
// its gate at the active format given of a build that writes formats 6
// and 7, sending while it leads; got takes every delivery's body.
func etcdWebhookServer(t *testing.T, c *etcdtest.Cluster, prefix string, active storeformat.Format) (*peopleServer, reinv1.WebhookServiceClient, string, chan []byte) {
	t.Helper()
	got := make(chan []byte, 64)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- b
	}))
	t.Cleanup(recv.Close)
	st, err := etcdstore.Open(context.Background(), c.Client(), prefix, etcdstore.Options{Outbox: (&webhook.Matcher{}).Outbox()})
	if err != nil {
		t.Fatal(err)
	}
	gate := storeformat.NewGate(storeformat.Build{Reads: storeformat.Range{Min: 1, Max: 7}, Writes: storeformat.Range{Min: 6, Max: 7}}, active, nil)
	lead := func(ctx context.Context) (<-chan struct{}, func(), error) {
		return st.Lead(ctx, "webhook-sender", "test", 2*time.Second)
	}
	w := newWriteTools(t)
	m := &modelLog{}
	send := &webhook.Config{Client: webhook.NewClient(true, webhook.Timeouts{}), Poll: 10 * time.Millisecond}
	s := serveTCP(t, Config{Store: st, Tools: w, Models: m.models, Directory: testDirectory(t), Cluster: storeformat.NewSingle("test", gate, nil),
		Webhooks: &Webhooks{Send: send, AllowPrivate: true, Lead: lead, Follow: st.FollowOutbox, NeedFormat: 7, NeedFormatOn: "etcd"}})
	w.watchStore(s.node.Store)
	ps := &peopleServer{tcpServer: s, tools: w, models: m, opts: []grpc.CallOption{as("a-operator")}}
	return ps, reinv1.NewWebhookServiceClient(s.conn), recv.URL, got
}

// TestEtcdWebhooksWaitForTheirFormat: on etcd, a subscription is refused
// with FailedPrecondition, saying what to do, and writes no key until the
// store's active format is 7; then it is taken, and a pause is delivered.
func TestEtcdWebhooksWaitForTheirFormat(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx := context.Background()
	cases := []struct {
		active storeformat.Format
		code   codes.Code
	}{{6, codes.FailedPrecondition}, {7, codes.OK}}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("format %d", tc.active), func(t *testing.T) {
			prefix := fmt.Sprintf("/rein-%d/", tc.active)
			s, hooks, url, got := etcdWebhookServer(t, c, prefix, tc.active)
			// The subscription's keys: P webhook/ and P webhook-rev/.
			subKeys := func() int64 {
				resp, err := c.Client().Get(ctx, prefix+"webhook", clientv3.WithPrefix(), clientv3.WithCountOnly())
				if err != nil {
					t.Fatal(err)
				}
				return resp.Count
			}
			_, err := hooks.CreateWebhook(ctx, &reinv1.CreateWebhookRequest{Webhook: &reinv1.Webhook{
				Name: "oncall", Url: url, Statuses: []reinv1.RunStatus{stNeedsApproval}, Secrets: []string{testSecret},
			}}, as("a-operator"))
			if status.Code(err) != tc.code {
				t.Fatalf("CreateWebhook at format %d: %v, want %v", tc.active, err, tc.code)
			}
			if tc.code != codes.OK {
				if msg := status.Convert(err).Message(); !strings.Contains(msg, "need store format 7") || !strings.Contains(msg, "rein cluster finalize") {
					t.Fatalf("the refusal says %q; want the format it needs and what to do", msg)
				}
				if n := subKeys(); n != 0 {
					t.Fatalf("the refused CreateWebhook wrote %d keys", n)
				}
				return
			}
			if n := subKeys(); n != 2 {
				t.Fatalf("CreateWebhook wrote %d keys, want the subscription and its tenant's version", n)
			}
			run := s.begin(t, writeContract(refundCall()), stNeedsApproval, as("a-operator"))
			select {
			case body := <-got:
				if !strings.Contains(string(body), run.GetRunId()) || !strings.Contains(string(body), "needs_approval") {
					t.Fatalf("the delivery is %s; want the run's pause", body)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("no delivery came for the paused run")
			}
		})
	}
}
