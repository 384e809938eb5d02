package slackapp

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Window is how far a request's timestamp may be from the server's clock,
// either way, as Slack advises: older requests are refused, and within it a
// signature is taken once.
const Window = 5 * time.Minute

// Sign is Slack's signature of body sent at ts with secret:
// "v0=" + hex(HMAC-SHA256(secret, "v0:" + ts + ":" + body)).
// (api.slack.com/authentication/verifying-requests-from-slack)
func Sign(secret []byte, ts string, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("v0:" + ts + ":"))
	mac.Write(body)
	return "v0=" + hex.EncodeToString(mac.Sum(nil))
}

// errUnsigned and the others are why a request is not Slack's; each is
// answered 401.
var (
	errUnsigned   = errors.New("no X-Slack-Signature or X-Slack-Request-Timestamp header: the request is not from Slack")
	errBadSig     = errors.New("the X-Slack-Signature does not match the body: the request is not from Slack, or the signing secret (--slack-signing-secret-file) is not the app's")
	errOld        = errors.New("the X-Slack-Request-Timestamp is more than 5 minutes from this server's clock: refused as a replay (check the server's clock)")
	errReplayed   = errors.New("this signed request was taken already: refused as a replay")
	errTooMany    = errors.New("too many requests in the replay window to remember; try again shortly")
	maxRemembered = 100_000
)

// verify checks that body, sent with h, is signed by secret, at a time
// within Window of now.
func verify(secret []byte, h http.Header, body []byte, now time.Time) (sig string, sent time.Time, err error) {
	sig, ts := h.Get("X-Slack-Signature"), h.Get("X-Slack-Request-Timestamp")
	if sig == "" || ts == "" {
		return "", time.Time{}, errUnsigned
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("the X-Slack-Request-Timestamp %q is not a number of seconds", cutHeader(ts))
	}
	sent = time.Unix(secs, 0)
	if d := now.Sub(sent); d > Window || d < -Window {
		return "", time.Time{}, errOld
	}
	got, ok := strings.CutPrefix(sig, "v0=")
	want := Sign(secret, ts, body)[len("v0="):]
	// Compared as bytes of equal length in constant time; a signature of
	// another version or length simply does not match.
	if !ok || !hmac.Equal([]byte(got), []byte(want)) {
		return "", time.Time{}, errBadSig
	}
	return sig, sent, nil
}

func cutHeader(s string) string { return cut(s, 40) }

// seen remembers the signatures taken within Window of their timestamps,
// so that each is taken once.
type seen struct {
	// mu guards sigs and order.
	mu   sync.Mutex
	sigs map[string]time.Time
	// order is sigs in the order taken, for forgetting the old ones.
	order []seenSig
}

type seenSig struct {
	sig     string
	forgets time.Time
}

// take records sig, sent at sent, and refuses one taken already.
func (s *seen) take(sig string, sent, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sigs == nil {
		s.sigs = map[string]time.Time{}
	}
	// Forget what is past the window: a request that old is refused by
	// its timestamp.
	for len(s.order) > 0 && now.After(s.order[0].forgets) {
		delete(s.sigs, s.order[0].sig)
		s.order = s.order[1:]
	}
	if _, dup := s.sigs[sig]; dup {
		return errReplayed
	}
	if len(s.sigs) >= maxRemembered {
		return errTooMany
	}
	forgets := sent.Add(Window)
	s.sigs[sig] = forgets
	s.order = append(s.order, seenSig{sig: sig, forgets: forgets})
	return nil
}
