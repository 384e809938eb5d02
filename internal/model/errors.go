package model

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// ErrRetryable marks a model error that may be retried after a wait: a rate
// limit or a provider's server error.
var ErrRetryable = errors.New("retryable model error")

// HTTPError is a provider's refusal of a call, with its HTTP status. A rate
// limit (429) or a server error (5xx) unwraps to ErrRetryable; RetryAfter is
// the wait the provider asked for, 0 when it named none.
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

func (e *HTTPError) Error() string {
	switch e.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
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
	case e.StatusCode == http.StatusPaymentRequired:
		s += "; the account's quota or billing needs attention"
	case e.StatusCode == http.StatusNotFound:
		s += "; check model.name and model.base_url"
	case e.StatusCode >= 400 && e.StatusCode < 500:
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
func (e *HTTPError) Retryable() bool {
	return e.StatusCode == http.StatusTooManyRequests || e.StatusCode >= 500
}

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
