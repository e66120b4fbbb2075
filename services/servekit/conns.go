package servekit

import (
	"net"
	"sync"
)

// The gRPC port serves one reconciler: a few connections with a few
// streams each. maxConnsPerHost bounds one host's share; reservedConns are
// kept for connections that have carried an authenticated call, so that
// callers without a token (a health Check needs none, and any connection
// stays open two idle minutes) cannot fill the port and lock the
// reconciler out. The 16 left to everyone else bound what they cost: each
// a TLS session, a goroutine or three and, while it sends, its headers (a
// header bomb at every port of an agent adds about 7 MiB).
const (
	maxTCPConns     = 32
	maxConnsPerHost = 16
	reservedConns   = 16
)

// connLimits bounds the connections of one port: maxTotal in all,
// maxPerHost from one host, and at most maxUnproven that have not carried
// an authenticated call (prove). A connection is unproven until then, the
// reconciler's new one included; so a newcomer that finds the unproven
// share full takes the place of the oldest unproven connection of the host
// holding the most, unless its own host holds as many (then it is
// refused: the busiest hosts cannot churn each other's places). A host
// with few connections (the reconciler's) thus gets in and keeps its new
// connection while the flood comes from fewer hosts than the unproven
// share.
type connLimits struct {
	maxTotal, maxPerHost, maxUnproven int

	mu       sync.Mutex
	hosts    map[string]*hostConns
	byAddr   map[string]*limitedConn
	total    int
	unproven int
	accepted uint64
}

type hostConns struct {
	open     int
	unproven []*limitedConn // oldest first
}

func newConnLimits(maxTotal, maxPerHost, reserved int) *connLimits {
	return &connLimits{
		maxTotal: maxTotal, maxPerHost: maxPerHost, maxUnproven: maxTotal - reserved,
		hosts: map[string]*hostConns{}, byAddr: map[string]*limitedConn{},
	}
}

// listen applies the limits to l's connections.
func (cl *connLimits) listen(l net.Listener) net.Listener {
	return &limitedListener{Listener: l, limits: cl}
}

// prove marks the connection from remote (a peer's or a request's remote
// address) as one that carried an authenticated call: it is never evicted.
func (cl *connLimits) prove(remote string) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	c := cl.byAddr[remote]
	if c == nil || c.proven {
		return
	}
	c.proven = true
	cl.unproven--
	h := cl.hosts[c.host]
	h.unproven = remove(h.unproven, c)
}

type limitedListener struct {
	net.Listener
	limits *connLimits
}

func (l *limitedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		admitted, evicted := l.limits.admit(c)
		if evicted != nil {
			_ = evicted.Conn.Close()
		}
		if admitted == nil {
			_ = c.Close()
			continue
		}
		return admitted, nil
	}
}

// admit takes c in, or returns nil when its host holds its share or every
// place is held by a proven connection; evicted is a connection whose place
// c takes, to be closed.
func (cl *connLimits) admit(c net.Conn) (admitted, evicted *limitedConn) {
	host := c.RemoteAddr().String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	h := cl.hosts[host]
	if h != nil && h.open >= cl.maxPerHost {
		return nil, nil
	}
	if cl.total >= cl.maxTotal || cl.unproven >= cl.maxUnproven {
		evicted = cl.victim()
		if evicted == nil || (h != nil && len(h.unproven) >= len(cl.hosts[evicted.host].unproven)) {
			return nil, nil
		}
		cl.forget(evicted)
		h = cl.hosts[host] // forget drops a host left with none
	}
	if h == nil {
		h = &hostConns{}
		cl.hosts[host] = h
	}
	cl.accepted++
	admitted = &limitedConn{Conn: c, limits: cl, host: host, seq: cl.accepted}
	h.open++
	h.unproven = append(h.unproven, admitted)
	cl.total++
	cl.unproven++
	cl.byAddr[c.RemoteAddr().String()] = admitted
	return admitted, evicted
}

// victim is the oldest unproven connection of the host holding the most,
// nil if none is unproven.
func (cl *connLimits) victim() *limitedConn {
	var v *limitedConn
	most := 0
	for _, h := range cl.hosts {
		if n := len(h.unproven); n > most || (n == most && n > 0 && h.unproven[0].seq < v.seq) {
			v, most = h.unproven[0], n
		}
	}
	return v
}

// forget drops c from the counts; it is closed or about to be.
func (cl *connLimits) forget(c *limitedConn) {
	if c.gone {
		return
	}
	c.gone = true
	h := cl.hosts[c.host]
	if !c.proven {
		cl.unproven--
		h.unproven = remove(h.unproven, c)
	}
	cl.total--
	if h.open--; h.open == 0 {
		delete(cl.hosts, c.host)
	}
	delete(cl.byAddr, c.RemoteAddr().String())
}

func remove(cs []*limitedConn, c *limitedConn) []*limitedConn {
	for i, x := range cs {
		if x == c {
			return append(cs[:i], cs[i+1:]...)
		}
	}
	return cs
}

type limitedConn struct {
	net.Conn
	limits *connLimits
	host   string
	seq    uint64
	// Under limits.mu.
	proven, gone bool
}

func (c *limitedConn) Close() error {
	c.limits.mu.Lock()
	c.limits.forget(c)
	c.limits.mu.Unlock()
	return c.Conn.Close()
}
