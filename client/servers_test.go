package client_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/reinhq/rein/client"
	reinv1 "github.com/reinhq/rein/gen/rein/v1"
)

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// TestDialListOfServers: given a list, the client reaches the first
// server that answers, in order, past one that is down. The twins: a list
// of servers none of which answers fails Unavailable, and a list with an
// empty entry is refused at Dial.
func TestDialListOfServers(t *testing.T) {
	_, alive := serve(t)
	c := dial(t, deadAddr(t)+","+alive)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Runs.ListRuns(ctx, &reinv1.ListRunsRequest{}); err != nil {
		t.Fatalf("ListRuns past a server that is down: %v", err)
	}

	none := dial(t, deadAddr(t)+","+deadAddr(t))
	short, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel2()
	if _, err := none.Runs.ListRuns(short, &reinv1.ListRunsRequest{}); err == nil {
		t.Fatal("ListRuns with no server up succeeded")
	}
	if _, err := client.Dial(alive+",", client.Options{}); err == nil {
		t.Fatal("a list with an empty address was taken")
	}
	if _, err := client.Dial("127.0.0.1:1,example.com:7233", client.Options{Token: "t"}); !errors.Is(err, client.ErrPlaintextToken) {
		t.Fatalf("a token in plaintext to a listed host that is not loopback: %v, want ErrPlaintextToken", err)
	}
}
