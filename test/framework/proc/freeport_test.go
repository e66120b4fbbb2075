package proc

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// A port FreePort gives is below the ephemeral range, where no outgoing
// connection takes it, and free to listen on.
func TestFreePortIsBelowTheEphemeralRange(t *testing.T) {
	low, ok := ephemeralLow()
	if !ok || low <= lowestFreePort {
		t.Skipf("no ephemeral range above %d to stay below (read: %d, %v)", lowestFreePort, low, ok)
	}
	for range 20 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if port < lowestFreePort || port >= low {
			t.Fatalf("FreePort gave %d, want one in [%d, %d)", port, lowestFreePort, low)
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatalf("listen on the port FreePort gave: %v", err)
		}
		_ = l.Close()
	}
}

// Callers that share the reservations file never get the same port, even
// all at once from separate opens of the file, as separate test processes
// would; with every port of the range reserved, the next caller gets an
// error rather than a port someone else holds.
func TestReservedPortsAreNeverHandedOutTwice(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ports")
	const low, callers, each = 20000, 8, 5
	got := make(chan int, callers*each)
	errs := make(chan error, callers*each)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range each {
				port, err := reservePort(path, low, low+callers*each, time.Now(), allFree)
				if err != nil {
					errs <- err
					continue
				}
				got <- port
			}
		})
	}
	wg.Wait()
	close(got)
	close(errs)
	for err := range errs {
		t.Errorf("reserve: %v", err)
	}
	seen := map[int]bool{}
	for port := range got {
		if seen[port] {
			t.Errorf("port %d handed out twice", port)
		}
		seen[port] = true
	}
	if _, err := reservePort(path, low, low+callers*each, time.Now(), allFree); err == nil {
		t.Error("a port was handed out though every port of the range was reserved")
	}
}

// A reservation lapses after reservationTTL, and a line no writer finished
// reserves nothing.
func TestReservationsLapse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ports")
	const port = 20000
	t0 := time.Now()
	if got, err := reservePort(path, port, port+1, t0, allFree); err != nil || got != port {
		t.Fatalf("first reservation: %d, %v; want %d", got, err, port)
	}
	if _, err := reservePort(path, port, port+1, t0.Add(time.Second), allFree); err == nil {
		t.Fatal("the port was handed out again while reserved")
	}
	if got, err := reservePort(path, port, port+1, t0.Add(reservationTTL+time.Second), allFree); err != nil || got != port {
		t.Fatalf("after the reservation lapsed: %d, %v; want %d", got, err, port)
	}
	if err := os.WriteFile(path, []byte(fmt.Sprintf("%d\n12", port)), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := reservePort(path, port, port+1, t0, allFree); err != nil || got != port {
		t.Fatalf("after a torn line: %d, %v; want %d", got, err, port)
	}
}

// allFree stands in for the probe: these tests are about the reservations,
// and a real port another process happens to hold would fail them.
func allFree(int) bool { return true }
