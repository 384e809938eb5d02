package browser

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// calls watches one tab's network: the answers to one RPC held back until
// the test lets them through, and the bodies of another RPC's answers as
// the page receives them. It makes a slow server answer happen on demand.
type calls struct {
	t    *testing.T
	ctx  context.Context
	held chan fetch.RequestID // answers paused at the response stage

	mu      sync.Mutex
	watched map[network.RequestID]bool // requests of the watched RPC
	arrived chan network.RequestID     // those whose answer the page has read
}

// watchCalls holds every answer to the RPC named hold (its path, such as
// "/rein.v1.RunService/DecideApproval") in tab ctx, and reports each answer
// to the RPC named watch once the page has it. Call it before the page
// makes the calls.
func watchCalls(t *testing.T, ctx context.Context, hold, watch string) *calls {
	t.Helper()
	c := &calls{t: t, ctx: ctx, held: make(chan fetch.RequestID, 16),
		watched: map[network.RequestID]bool{}, arrived: make(chan network.RequestID, 256)}
	// The listener runs in the tab's read loop: it only records and sends
	// on channels with room.
	if err := chromedp.Listen(ctx, func(ev any) {
		switch e := ev.(type) {
		case *fetch.EventRequestPaused:
			select {
			case c.held <- e.RequestID:
			default:
			}
		case *network.EventRequestWillBeSent:
			if strings.HasSuffix(e.Request.URL, watch) {
				c.mu.Lock()
				c.watched[e.RequestID] = true
				c.mu.Unlock()
			}
		case *network.EventLoadingFinished:
			c.mu.Lock()
			ours := c.watched[e.RequestID]
			c.mu.Unlock()
			if ours {
				select {
				case c.arrived <- e.RequestID:
				default:
				}
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{
		{URLPattern: "*" + hold, RequestStage: fetch.RequestStageResponse},
	}}); err != nil {
		t.Fatal(err)
	}
	return c
}

// nextHeld waits for the next held answer.
func (c *calls) nextHeld() fetch.RequestID {
	c.t.Helper()
	select {
	case id := <-c.held:
		return id
	case <-time.After(20 * time.Second):
		c.t.Fatal("no call was held within 20s")
	case <-c.ctx.Done():
		c.t.Fatal(c.ctx.Err())
	}
	return ""
}

// release lets a held answer reach the page.
func (c *calls) release(id fetch.RequestID) {
	c.t.Helper()
	if _, err := chromedp.Call(c.ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: id}); err != nil {
		c.t.Fatalf("release the held answer: %v", err)
	}
}

// arrivedWith waits until the page has read an answer to the watched RPC
// for which ok holds of its body.
func (c *calls) arrivedWith(what string, ok func(body string) bool) {
	c.t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case id := <-c.arrived:
			got, err := chromedp.Call(c.ctx, network.GetResponseBody, network.GetResponseBodyParams{RequestID: id})
			if err != nil {
				continue // an answer the browser no longer keeps
			}
			if ok(string(got.Body)) { // decoded from base64 already
				return
			}
		case <-deadline:
			c.t.Fatalf("the page read no answer %s within 20s", what)
		case <-c.ctx.Done():
			c.t.Fatal(c.ctx.Err())
		}
	}
}
