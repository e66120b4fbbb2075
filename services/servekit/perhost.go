package servekit

import (
	"net"
	"sync"
)

// maxConnsPerHost bounds one remote host's share of the TCP connections:
// idle connections from one caller (a health Watch needs no token) cannot
// take every slot of the listener and lock the reconciler out.
const maxConnsPerHost = 16

// perHostListener closes a new connection from a host that already holds
// max open ones.
type perHostListener struct {
	net.Listener
	max  int
	mu   sync.Mutex
	open map[string]int
}

func limitPerHost(l net.Listener, max int) net.Listener {
	return &perHostListener{Listener: l, max: max, open: map[string]int{}}
}

func (l *perHostListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host := c.RemoteAddr().String()
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		l.mu.Lock()
		full := l.open[host] >= l.max
		if !full {
			l.open[host]++
		}
		l.mu.Unlock()
		if full {
			_ = c.Close()
			continue
		}
		return &hostConn{Conn: c, release: sync.OnceFunc(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.open[host]--; l.open[host] <= 0 {
				delete(l.open, host)
			}
		})}, nil
	}
}

type hostConn struct {
	net.Conn
	release func()
}

func (c *hostConn) Close() error {
	c.release()
	return c.Conn.Close()
}
