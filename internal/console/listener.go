package console

import (
	"net"
	"net/netip"
	"sync"
)

// LimitPerClient wraps lis so that no client address holds more than max
// connections at once: a connection past it is closed as it is accepted,
// so one client cannot take every file descriptor the server has. max <= 0
// means no limit. Clients behind one proxy share its address.
func LimitPerClient(lis net.Listener, max int) net.Listener {
	if max <= 0 {
		return lis
	}
	return &perClient{Listener: lis, max: max, open: map[string]int{}}
}

type perClient struct {
	net.Listener
	max int
	// mu guards open: the connections each client address holds.
	mu   sync.Mutex
	open map[string]int
}

func (l *perClient) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key := clientKey(c.RemoteAddr())
		l.mu.Lock()
		over := l.open[key] >= l.max
		if !over {
			l.open[key]++
		}
		l.mu.Unlock()
		if over {
			_ = c.Close()
			continue
		}
		return &clientConn{Conn: c, release: func() { l.release(key) }}, nil
	}
}

func (l *perClient) release(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[key]--; l.open[key] <= 0 {
		delete(l.open, key)
	}
}

// clientKeyOf is the client of an HTTP request's remote address
// (http.Request.RemoteAddr, host:port), or the address itself if it does
// not parse.
func clientKeyOf(remote string) string {
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		return clientKey(net.TCPAddrFromAddrPort(ap))
	}
	return remote
}

// clientKey is a connection's client: its IPv4 address, or the /64 of its
// IPv6 address (one host is commonly given a whole /64).
func clientKey(a net.Addr) string {
	var ip net.IP
	if t, ok := a.(*net.TCPAddr); ok {
		ip = t.IP
	} else if host, _, err := net.SplitHostPort(a.String()); err == nil {
		ip = net.ParseIP(host)
	}
	switch {
	case ip == nil:
		return a.String()
	case ip.To4() != nil:
		return ip.To4().String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// clientConn gives its slot back once, when it closes.
type clientConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *clientConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
