package servekit

import (
	"io"
	"net"
	"testing"
	"time"
)

// limitedPort is a loopback listener behind limits, accepting in the
// background.
type limitedPort struct {
	t        *testing.T
	addr     string
	accepted chan net.Conn
}

func newLimitedPort(t *testing.T, limits *connLimits) *limitedPort {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := limits.listen(inner)
	t.Cleanup(func() { l.Close() })
	p := &limitedPort{t: t, addr: inner.Addr().String(), accepted: make(chan net.Conn, 100)}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.accepted <- c
		}
	}()
	return p
}

// dial connects from a loopback address.
func (p *limitedPort) dial(from string) net.Conn {
	p.t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", p.addr)
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { c.Close() })
	return c
}

// accept is the server's side of the next connection let in.
func (p *limitedPort) accept(what string) net.Conn {
	p.t.Helper()
	select {
	case c := <-p.accepted:
		return c
	case <-time.After(5 * time.Second):
		p.t.Fatalf("%s was not accepted", what)
		return nil
	}
}

// closedByServer: the server closed c (the client reads EOF).
func closedByServer(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 1))
	return err == io.EOF
}

// One host holding its share of connections cannot take another's slot:
// its next connection is closed at once, and a slot it gives back is
// usable again.
func TestOneHostCannotTakeEveryConnection(t *testing.T) {
	p := newLimitedPort(t, newConnLimits(10, 2, 0))
	p.dial("127.0.0.2")
	first := p.accept("127.0.0.2's first connection")
	p.dial("127.0.0.2")
	p.accept("127.0.0.2's second connection")
	if third := p.dial("127.0.0.2"); !closedByServer(third) {
		t.Fatal("127.0.0.2's third connection was not closed")
	}
	p.dial("127.0.0.3")
	if c := p.accept("127.0.0.3's connection while 127.0.0.2 holds its share"); c.RemoteAddr().(*net.TCPAddr).IP.String() != "127.0.0.3" {
		t.Fatalf("accepted %s, want 127.0.0.3", c.RemoteAddr())
	}
	first.Close()
	p.dial("127.0.0.2")
	p.accept("127.0.0.2's connection after it gave one back")
}

// When unproven connections fill their share, a newcomer takes the place
// of the oldest unproven connection of the host holding the most, unless
// its own host holds as many; a proven connection keeps its place.
func TestANewcomerEvictsTheBusiestHostsOldestUnprovenConnection(t *testing.T) {
	limits := newConnLimits(6, 4, 2) // 4 unproven at most
	p := newLimitedPort(t, limits)

	var flood []net.Conn // client sides, oldest first
	for _, host := range []string{"127.0.0.2", "127.0.0.2", "127.0.0.2", "127.0.0.3"} {
		flood = append(flood, p.dial(host))
		p.accept(host)
	}
	// The busiest host cannot churn: its newcomer is refused.
	if c := p.dial("127.0.0.2"); !closedByServer(c) {
		t.Fatal("a newcomer of the busiest host was let in")
	}
	// The reconciler's new connection: 127.0.0.2, holding the most, loses
	// its oldest.
	p.dial("127.0.0.1")
	reconciler := p.accept("the reconciler's connection")
	if !closedByServer(flood[0]) {
		t.Fatal("127.0.0.2's oldest connection was not evicted")
	}
	limits.prove(reconciler.RemoteAddr().String())

	// The proven connection left a place; once 127.0.0.3 takes it, both
	// hosts hold as many, and their newcomers are refused. The proven
	// connection stays.
	p.dial("127.0.0.3")
	p.accept("127.0.0.3's second connection")
	for _, host := range []string{"127.0.0.2", "127.0.0.3"} {
		if c := p.dial(host); !closedByServer(c) {
			t.Fatalf("a newcomer of %s, as busy as the busiest, was let in", host)
		}
	}
	_ = reconciler.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := reconciler.Read(make([]byte, 1)); err == io.EOF {
		t.Fatal("the proven connection was evicted")
	}
	limits.mu.Lock()
	total, unproven := limits.total, limits.unproven
	limits.mu.Unlock()
	if total != 5 || unproven != 4 {
		t.Fatalf("%d connections open, %d unproven; want 5 and 4", total, unproven)
	}
}
