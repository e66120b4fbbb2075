package servekit

import (
	"io"
	"net"
	"testing"
	"time"
)

// One host holding its share of connections cannot take another's slot:
// its next connection is closed at once, and a slot it gives back is
// usable again.
func TestOneHostCannotTakeEveryConnection(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := limitPerHost(inner, 2)
	defer l.Close()
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func(from string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	accept := func(what string) net.Conn {
		t.Helper()
		select {
		case c := <-accepted:
			return c
		case <-time.After(5 * time.Second):
			t.Fatalf("%s was not accepted", what)
			return nil
		}
	}
	closedByServer := func(c net.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := c.Read(make([]byte, 1))
		return err == io.EOF
	}

	dial("127.0.0.2")
	first := accept("127.0.0.2's first connection")
	dial("127.0.0.2")
	accept("127.0.0.2's second connection")
	third := dial("127.0.0.2")
	if !closedByServer(third) {
		t.Fatal("127.0.0.2's third connection was not closed")
	}
	dial("127.0.0.3")
	if c := accept("127.0.0.3's connection while 127.0.0.2 holds its share"); c.RemoteAddr().(*net.TCPAddr).IP.String() != "127.0.0.3" {
		t.Fatalf("accepted %s, want 127.0.0.3", c.RemoteAddr())
	}
	first.Close()
	dial("127.0.0.2")
	accept("127.0.0.2's connection after it gave one back")
}
