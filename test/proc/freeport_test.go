package proc

import (
	"fmt"
	"net"
	"testing"
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
