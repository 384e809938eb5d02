package model

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"syscall"
	"time"
)

// ErrRetryable marks a model error that may be retried after a wait: a rate
// limit or a provider's server error.
var ErrRetryable = errors.New("retryable model error")

// HTTPError is a provider's refusal of a call, with its HTTP status; every
// provider makes one with NewHTTPError. A status of ClassRetryable (see
// Classify) unwraps to ErrRetryable; RetryAfter is the wait the provider
// asked for, 0 when it named none.
type HTTPError struct {
	// Provider is the ModelSpec provider, e.g. "openai".
	Provider   string
	StatusCode int
	// Message is the provider's error message, if it gave one.
	Message    string
	RetryAfter time.Duration
	// KeyEnv names the environment variable that holds the provider's key,
	// for the message of a refused key.
	KeyEnv string
}

// Class is what a provider's HTTP status means for a call: the one rule
// by which every provider's refusal is retried, reported as a refused key,
// or reported as the account's or the request's fault.
type Class int

const (
	// ClassOther is a status that is none of the below (not an error
	// status a provider documents).
	ClassOther Class = iota
	// ClassRetryable is a rate limit (429) or a server error (5xx): the
	// call may be retried after a wait.
	ClassRetryable
	// ClassAuth is a refused API key (401, 403).
	ClassAuth
	// ClassPayment is an account whose quota or billing needs attention
	// (402).
	ClassPayment
	// ClassRequest is any other 4xx: the request itself was refused.
	ClassRequest
)

// Classify is the class of an HTTP status.
func Classify(status int) Class {
	switch {
	case status == http.StatusTooManyRequests || status >= 500:
		return ClassRetryable
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return ClassAuth
	case status == http.StatusPaymentRequired:
		return ClassPayment
	case status >= 400 && status < 500:
		return ClassRequest
	}
	return ClassOther
}

// Class is the class of the error's status.
func (e *HTTPError) Class() Class { return Classify(e.StatusCode) }

func (e *HTTPError) Error() string {
	class := e.Class()
	if class == ClassAuth {
		s := fmt.Sprintf("%s refused the API key (HTTP %d)", e.Provider, e.StatusCode)
		if e.KeyEnv != "" {
			s += ": set " + e.KeyEnv + " in the server's environment or its --secrets file"
		}
		if e.Message != "" {
			s += " (" + e.Message + ")"
		}
		return s
	}
	s := fmt.Sprintf("%s answered HTTP %d", e.Provider, e.StatusCode)
	if text := http.StatusText(e.StatusCode); text != "" {
		s += " " + text
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	switch {
	case e.StatusCode == http.StatusTooManyRequests:
		s += "; rate limited: retry later or raise the account's limits"
	case class == ClassPayment:
		s += "; the account's quota or billing needs attention"
	case e.StatusCode == http.StatusNotFound:
		s += "; check model.name and model.base_url"
	case class == ClassRequest:
		s += "; the request was refused: check the model spec"
	}
	return s
}

// NewHTTPError is a provider's refusal as rein reports it, with the wait
// its Retry-After header asks for (resp may be nil).
func NewHTTPError(provider, keyEnv string, status int, message string, resp *http.Response) *HTTPError {
	e := &HTTPError{Provider: provider, StatusCode: status, Message: message, KeyEnv: keyEnv}
	if resp != nil {
		e.RetryAfter = ParseRetryAfter(resp.Header, time.Now())
	}
	return e
}

// Retryable reports whether the call may be retried after a wait.
func (e *HTTPError) Retryable() bool { return e.Class() == ClassRetryable }

// Unwrap returns ErrRetryable for a retryable status.
func (e *HTTPError) Unwrap() error {
	if e.Retryable() {
		return ErrRetryable
	}
	return nil
}

// RetryWaiter is an error that names the wait before a retry.
type RetryWaiter interface {
	RetryWait() time.Duration
}

// RetryWait is the wait the provider asked for; 0 when it named none.
func (e *HTTPError) RetryWait() time.Duration { return e.RetryAfter }

// RetryAfter is the wait a retryable error asks for (0 when it names none),
// and whether err is retryable at all.
func RetryAfter(err error) (time.Duration, bool) {
	if !errors.Is(err, ErrRetryable) {
		return 0, false
	}
	var w RetryWaiter
	if errors.As(err, &w) {
		return w.RetryWait(), true
	}
	return 0, true
}

// ParseRetryAfter reads a Retry-After header: delay-seconds or an HTTP date
// (relative to now). It returns 0 for an empty or unreadable value.
func ParseRetryAfter(h http.Header, now time.Time) time.Duration {
	v := h.Get("Retry-After")
	if v == "" {
		// Some providers send milliseconds in their own header.
		if ms, err := strconv.ParseFloat(h.Get("Retry-After-Ms"), 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// TransportError is a call that failed before its provider answered: the
// connection was refused, the host was not found, or the connection was
// reset or cut before a response. It unwraps to ErrRetryable (and to the
// cause): the one retry owner sends the call once more, as after a 429 or
// a 5xx.
type TransportError struct {
	Provider string
	Err      error
}

func (e *TransportError) Error() string {
	return fmt.Sprintf("%s could not be reached: %v; check model.base_url and the network", e.Provider, e.Err)
}

func (e *TransportError) Unwrap() []error { return []error{ErrRetryable, e.Err} }

// Transport is err as a provider reports a call that got no answer: a
// *TransportError when the transport failed (see TransportError), else err
// prefixed with the provider's name. A cancelled or timed-out context is
// never a transport failure: the caller stopped the call.
func Transport(provider string, err error) error {
	if isTransport(err) {
		return &TransportError{Provider: provider, Err: err}
	}
	return fmt.Errorf("%s: %w", provider, err)
}

func isTransport(err error) bool {
	var (
		op  *net.OpError
		dns *net.DNSError
		// The HTTP client's error for a round trip that got no response
		// (a reply that came and does not parse is not one).
		rt *url.Error
	)
	switch {
	case err == nil, errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	case errors.As(err, &dns), errors.As(err, &op), errors.As(err, &rt):
		return true
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	return false
}

// RetryReasoner is an error that says its own retry reason (a replayed
// failure says the recorded one).
type RetryReasoner interface{ RetryReason() string }

// RetryReason is why a retryable failure is retried, one of a few words
// (model_retried's reason, and a metric's label): "rate_limited" (HTTP
// 429), "server_error" (5xx), "transport" (the connection failed before a
// response), else "retryable".
func RetryReason(err error) string {
	var rr RetryReasoner
	if errors.As(err, &rr) {
		return rr.RetryReason()
	}
	if he, ok := errors.AsType[*HTTPError](err); ok {
		switch {
		case he.StatusCode == http.StatusTooManyRequests:
			return "rate_limited"
		case he.StatusCode >= 500:
			return "server_error"
		}
	}
	if _, ok := errors.AsType[*TransportError](err); ok {
		return "transport"
	}
	return "retryable"
}
