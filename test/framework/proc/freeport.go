package proc

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// FreePort returns a loopback TCP port free now, for a process to listen
// on later. It is chosen below the kernel's ephemeral range, since any
// outgoing connection can take a port from that range in between. It is
// also reserved for reservationTTL in a file every test process on the
// machine shares: test packages run side by side, and two of them picking
// the same port before either listens made one fail with "address already
// in use".
func FreePort() (int, error) {
	low, ok := ephemeralLow()
	if !ok || low <= lowestFreePort {
		return kernelPort()
	}
	return reservePort(reservationsPath(), lowestFreePort, low, time.Now(), listenable)
}

// FreeAddr returns a free loopback address "127.0.0.1:port".
func FreeAddr() (string, error) {
	port, err := FreePort()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", port), nil
}

// lowestFreePort keeps FreePort above the ports services usually own,
// the kubelet's 10248 and 10250 among them.
const lowestFreePort = 11000

// reservationTTL outlasts the time a started process takes to listen;
// after it, a listening process keeps its port from the probe anyway.
const reservationTTL = 2 * time.Minute

func reservationsPath() string {
	return filepath.Join(os.TempDir(), "nodeconfig-test-ports")
}

// reservePort picks a port in [low, high) that no caller reserved within
// reservationTTL and that free says is free now, and records it. An
// exclusive flock on the file serializes callers across processes.
func reservePort(path string, low, high int, now time.Time, free func(port int) bool) (int, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return 0, fmt.Errorf("port reservations: %w", err)
	}
	defer f.Close() // which releases the lock
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return 0, fmt.Errorf("lock %s: %w", path, err)
	}
	reserved := readReservations(f, now.Add(-reservationTTL))
	// From a random start, so that callers rarely probe the same ports.
	start := rand.IntN(high - low)
	for i := range high - low {
		port := low + (start+i)%(high-low)
		if _, taken := reserved[port]; taken || !free(port) {
			continue
		}
		reserved[port] = now
		if err := writeReservations(f, reserved); err != nil {
			return 0, fmt.Errorf("port reservations %s: %w", path, err)
		}
		return port, nil
	}
	return 0, fmt.Errorf("no free port in [%d, %d): %d reserved, the rest in use", low, high, len(reserved))
}

// readReservations returns the ports reserved after since. A line it
// cannot read (a writer killed halfway) reserves nothing.
func readReservations(f *os.File, since time.Time) map[int]time.Time {
	reserved := map[int]time.Time{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		port, at, ok := strings.Cut(sc.Text(), " ")
		p, perr := strconv.Atoi(port)
		nanos, terr := strconv.ParseInt(at, 10, 64)
		if !ok || perr != nil || terr != nil {
			continue
		}
		if t := time.Unix(0, nanos); t.After(since) {
			reserved[p] = t
		}
	}
	return reserved
}

func writeReservations(f *os.File, reserved map[int]time.Time) error {
	var b strings.Builder
	for port, at := range reserved {
		fmt.Fprintf(&b, "%d %d\n", port, at.UnixNano())
	}
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt([]byte(b.String()), 0)
	return err
}

func listenable(port int) bool {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// kernelPort is the fallback where no range below the ephemeral one is
// known: a port the kernel picks.
func kernelPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ephemeralLow is the first port of the kernel's ephemeral range, read once.
var ephemeralLow = sync.OnceValues(readEphemeralLow)

func readEphemeralLow() (int, bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, false
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		return 0, false
	}
	low, err := strconv.Atoi(fields[0])
	return low, err == nil
}
