package webhook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

func TestCheckAddr(t *testing.T) {
	for addr, refused := range map[string]bool{
		"127.0.0.1": true, "::1": true, "10.1.2.3": true, "172.16.0.1": true, "192.168.1.1": true,
		"169.254.169.254": true, "169.254.1.1": true, "fd00:ec2::254": true, "fe80::1": true,
		"100.64.0.1": true, "0.0.0.0": true, "::": true, "224.0.0.1": true, "ff02::1": true,
		"::ffff:127.0.0.1": true, "::ffff:10.0.0.1": true,
		"93.184.216.34": false, "2606:2800:220:1:248:1893:25c8:1946": false, "8.8.8.8": false,
	} {
		err := CheckAddr(netip.MustParseAddr(addr))
		if refused != errors.Is(err, ErrRefusedAddress) {
			t.Errorf("CheckAddr(%s) = %v, want refused=%v", addr, err, refused)
		}
	}
}

func TestCheckURL(t *testing.T) {
	for u, ok := range map[string]bool{
		"https://hooks.example.com/rein": true, "http://93.184.216.34:8080/x": true,
		"ftp://example.com/": false, "https://user:pw@example.com/": false, "https:///x": false,
		"http://127.0.0.1:9/": false, "http://[::1]/": false, "http://169.254.169.254/latest/meta-data": false,
		"http://localhost:8080/": false,
	} {
		if err := CheckURL(u, false); (err == nil) != ok {
			t.Errorf("CheckURL(%q) = %v, want ok=%v", u, err, ok)
		}
	}
	if err := CheckURL("http://127.0.0.1:9/", true); err != nil {
		t.Errorf("CheckURL of loopback with private allowed: %v", err)
	}
}

func testSender(client *http.Client) *Sender {
	return NewSender(Config{Store: nil, Client: client})
}

func sub(url string) *reinv1.Webhook {
	return &reinv1.Webhook{Name: "a", Url: url, Secrets: []string{specSecret}}
}

func delivery() *reinv1.WebhookDelivery {
	return &reinv1.WebhookDelivery{Id: "msg_a_r1_1", Webhook: "a", RunId: "r1", Sequence: 1, Body: []byte(`{"type":"run.running"}`)}
}

// TestSendRefusesLoopbackAtDial: a URL whose name resolves to loopback
// (localhost, as a receiver's DNS could answer) is refused as it is
// dialled, and the receiver never hears of it.
func TestSendRefusesLoopbackAtDial(t *testing.T) {
	hit := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hit <- struct{}{} }))
	defer srv.Close()
	url := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	a := testSender(NewClient(false, Timeouts{})).Send(context.Background(), sub(url), delivery())
	if !errors.Is(a.Err, ErrRefusedAddress) {
		t.Fatalf("Send to %s = %+v, want a refused address", url, a)
	}
	select {
	case <-hit:
		t.Fatal("the receiver on loopback was called")
	default:
	}
	// Its twin: with private addresses allowed, it is called.
	if a := testSender(NewClient(true, Timeouts{})).Send(context.Background(), sub(url), delivery()); a.Err != nil || a.Status != 200 {
		t.Fatalf("Send with private allowed = %+v", a)
	}
}

// TestSendFollowsNoRedirect: a receiver redirecting to the metadata
// address is a failed attempt; nothing is sent there.
func TestSendFollowsNoRedirect(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	a := testSender(NewClient(true, Timeouts{})).Send(context.Background(), sub(srv.URL), delivery())
	if a.Err == nil || a.Status != http.StatusTemporaryRedirect || !strings.Contains(a.Err.Error(), "redirect") {
		t.Fatalf("Send to a redirect = %+v, want a failed attempt naming the redirect", a)
	}
}

// TestSendBoundsHostileReceivers: an endless body is read to
// MaxResponseBytes at most, and a receiver that answers a byte at a time
// (or never) is cut at the response timeout.
func TestSendBoundsHostileReceivers(t *testing.T) {
	read := make(chan int64, 1)
	endless := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		buf := make([]byte, 32<<10)
		var n int64
		defer func() { read <- n }()
		for {
			m, err := w.Write(buf)
			n += int64(m)
			if err != nil {
				return
			}
		}
	}))
	defer endless.Close()
	a := testSender(NewClient(true, Timeouts{})).Send(context.Background(), sub(endless.URL), delivery())
	if a.Err != nil || a.Status != 200 {
		t.Fatalf("Send to an endless body = %+v", a)
	}
	// The server wrote until the client hung up: at most what the read
	// took plus what the socket buffers held, never without end.
	if n := <-read; n > 64<<20 {
		t.Fatalf("the endless receiver wrote %d bytes before rein hung up", n)
	}

	stop := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		for {
			if _, err := w.Write([]byte("x")); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}))
	defer slow.Close()
	silent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-stop
	}))
	defer silent.Close()
	defer close(stop) // before the servers' Close, which waits for their handlers
	for name, url := range map[string]string{"slowloris": slow.URL, "silent": silent.URL} {
		done := make(chan Attempt, 1)
		go func() {
			done <- testSender(NewClient(true, Timeouts{Response: 300 * time.Millisecond})).Send(context.Background(), sub(url), delivery())
		}()
		select {
		case a := <-done:
			if name == "silent" && a.Err == nil {
				t.Errorf("%s: Send = %+v, want a timeout", name, a)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: Send did not end at its response timeout", name)
		}
	}
}

// TestSendSigns: the receiver gets the headers of Standard Webhooks, and
// the signature verifies.
func TestSendSigns(t *testing.T) {
	got := make(chan *http.Request, 1)
	bodies := make(chan []byte, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r
		bodies <- b
	}))
	defer srv.Close()
	s := testSender(NewClient(true, Timeouts{}))
	d := delivery()
	if a := s.Send(context.Background(), sub(srv.URL), d); a.Err != nil {
		t.Fatal(a.Err)
	}
	r, body := <-got, <-bodies
	var ts int64
	if _, err := fmtSscan(r.Header.Get("webhook-timestamp"), &ts); err != nil {
		t.Fatal(err)
	}
	want, _ := Sign([]string{specSecret}, d.GetId(), ts, body)
	if r.Header.Get("webhook-id") != d.GetId() || r.Header.Get("webhook-signature") != want || string(body) != string(d.GetBody()) {
		t.Fatalf("headers %v, body %s", r.Header, body)
	}
	// Its twin: the slack format, not wired, is refused and sends nothing.
	w := sub(srv.URL)
	w.Format = reinv1.WebhookFormat_WEBHOOK_FORMAT_SLACK
	if a := s.Send(context.Background(), w, d); !errors.Is(a.Err, ErrNoFormat) {
		t.Fatalf("Send in the slack format = %+v, want ErrNoFormat", a)
	}
}

func fmtSscan(s string, v *int64) (int, error) { return fmt.Sscan(s, v) }
