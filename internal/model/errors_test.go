package model

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"syscall"
	"testing"
)

// TestClassify is the table of HTTP statuses both providers share: 429
// and 5xx are retried, 401 and 403 are a refused key, 402 the account,
// any other 4xx the request. Each class sits beside its neighbours that
// are not in it (428 and 430 beside 429, 499 beside 500, 400 and 404
// beside 401..403), and the error's message and retryability follow the
// class.
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		status int
		class  Class
		// says and not are in and absent from the error's message.
		says, not string
	}{
		{429, ClassRetryable, "rate limited", "check the model spec"},
		{500, ClassRetryable, "answered HTTP 500 Internal Server Error: boom", "check"},
		{503, ClassRetryable, "answered HTTP 503", "check"},
		{529, ClassRetryable, "answered HTTP 529: boom", "check"},
		{599, ClassRetryable, "answered HTTP 599", "check"},
		{401, ClassAuth, "refused the API key (HTTP 401): set TEST_API_KEY", "answered"},
		{403, ClassAuth, "refused the API key (HTTP 403): set TEST_API_KEY", "answered"},
		{402, ClassPayment, "quota or billing", "check the model spec"},
		{400, ClassRequest, "the request was refused: check the model spec", "API key"},
		{404, ClassRequest, "check model.name and model.base_url", "API key"},
		{405, ClassRequest, "the request was refused", "API key"},
		{428, ClassRequest, "the request was refused", "rate limited"},
		{430, ClassRequest, "the request was refused", "rate limited"},
		{499, ClassRequest, "the request was refused", "rate limited"},
		{302, ClassOther, "answered HTTP 302", "refused"},
		{200, ClassOther, "answered HTTP 200", "refused"},
		{0, ClassOther, "answered HTTP 0", "refused"},
	} {
		if got := Classify(tc.status); got != tc.class {
			t.Errorf("Classify(%d) = %d, want %d", tc.status, got, tc.class)
		}
		e := NewHTTPError("test", "TEST_API_KEY", tc.status, "boom", nil)
		retryable := tc.class == ClassRetryable
		if e.Class() != tc.class || e.Retryable() != retryable || errors.Is(e, ErrRetryable) != retryable {
			t.Errorf("HTTP %d: class %d, Retryable %v, is ErrRetryable %v; want class %d, retryable %v",
				tc.status, e.Class(), e.Retryable(), errors.Is(e, ErrRetryable), tc.class, retryable)
		}
		if _, ok := RetryAfter(e); ok != retryable {
			t.Errorf("HTTP %d: RetryAfter says retryable %v, want %v", tc.status, ok, retryable)
		}
		if msg := e.Error(); !strings.Contains(msg, tc.says) || strings.Contains(msg, tc.not) {
			t.Errorf("HTTP %d: message %q, want it to say %q and not %q", tc.status, msg, tc.says, tc.not)
		}
	}
}

func TestTransportClassifies(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, tc := range []struct {
		name      string
		err       error
		retryable bool
	}{
		{"connection refused", &url.Error{Op: "Post", URL: "http://x", Err: refused}, true},
		{"no such host", &net.DNSError{Err: "no such host", Name: "x.invalid", IsNotFound: true}, true},
		{"reset", fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{"cut before a response", &url.Error{Op: "Post", URL: "http://x", Err: io.EOF}, true},
		{"a reply that does not parse (twin)", fmt.Errorf("decode the reply: %w", io.ErrUnexpectedEOF), false},
		{"cancelled (twin)", fmt.Errorf("post: %w", context.Canceled), false},
		{"deadline (twin)", &url.Error{Op: "Post", URL: "http://x", Err: context.DeadlineExceeded}, false},
		{"another error (twin)", errors.New("decode the reply: bad JSON"), false},
	} {
		err := Transport("openai", tc.err)
		if got := errors.Is(err, ErrRetryable); got != tc.retryable {
			t.Errorf("%s: retryable %v, want %v (%v)", tc.name, got, tc.retryable, err)
		}
		if !errors.Is(err, tc.err) {
			t.Errorf("%s: %v does not wrap its cause", tc.name, err)
		}
	}
}

func TestRetryReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&HTTPError{Provider: "openai", StatusCode: 429}, "rate_limited"},
		{fmt.Errorf("call: %w", &HTTPError{Provider: "openai", StatusCode: 503}), "server_error"},
		{&TransportError{Provider: "openai", Err: errors.New("connection refused")}, "transport"},
		{fmt.Errorf("%w: scripted", ErrRetryable), "retryable"},
		{reasoned("rate_limited"), "rate_limited"},
		{reasoned(""), ""},
	} {
		if got := RetryReason(tc.err); got != tc.want {
			t.Errorf("RetryReason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

type reasoned string

func (r reasoned) Error() string       { return "replayed failure" }
func (r reasoned) RetryReason() string { return string(r) }
