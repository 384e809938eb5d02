package client

import (
	"errors"
	"testing"
)

// TestDialRefusesPlaintextToken: a token in plaintext goes only to
// loopback; elsewhere Dial refuses before connecting, unless TLS is on or
// InsecureToken says so.
func TestDialRefusesPlaintextToken(t *testing.T) {
	for _, c := range []struct {
		target string
		opts   Options
		refuse bool
	}{
		{"127.0.0.1:7233", Options{Token: "t"}, false},
		{"localhost:7233", Options{Token: "t"}, false},
		{"[::1]:7233", Options{Token: "t"}, false},
		{"dns:///localhost:7233", Options{Token: "t"}, false},
		{"unix:///tmp/rein.sock", Options{Token: "t"}, false},
		{"10.255.255.1:7233", Options{Token: "t"}, true},
		{"dns:///rein.example.com:7233", Options{Token: "t"}, true},
		{"[2001:db8::1]:7233", Options{Token: "t"}, true},
		{"10.255.255.1:7233", Options{Token: "t", InsecureToken: true}, false},
		{"10.255.255.1:7233", Options{Token: "t", SystemRoots: true}, false},
		{"10.255.255.1:7233", Options{}, false},
	} {
		c2, err := Dial(c.target, c.opts)
		if got := errors.Is(err, ErrPlaintextToken); got != c.refuse {
			t.Errorf("Dial(%s, token %q, insecure %v, roots %v): err %v, want refused %v", c.target, c.opts.Token, c.opts.InsecureToken, c.opts.SystemRoots, err, c.refuse)
		}
		if c2 != nil {
			_ = c2.Close()
		}
	}
}
