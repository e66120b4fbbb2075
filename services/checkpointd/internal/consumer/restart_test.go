package consumer

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

func TestSignalStopsTheConsumerNamedByItsPidFile(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	pidFile := filepath.Join(t.TempDir(), "consumer.pid")
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := (Signal{PidFile: pidFile, Timeout: 10 * time.Second}).Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the consumer still runs after Restart returned")
	}
	// Not running (its babysitter has not started it again): nothing to do.
	if err := (Signal{PidFile: pidFile}).Restart(context.Background()); err != nil {
		t.Fatalf("restart of a consumer that is down: %v", err)
	}
	if err := os.WriteFile(pidFile, []byte("not-a-pid"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := (Signal{PidFile: pidFile}).Restart(context.Background()); err == nil || !strings.Contains(err.Error(), "not a pid") {
		t.Fatalf("a garbled pid file: %v", err)
	}
}

// fakeSystemd is systemd's Manager on a private bus: RestartUnit answers a
// job and announces it done, as systemd does.
type fakeSystemd struct {
	conn      *dbus.Conn
	restarted chan string
}

func (f *fakeSystemd) RestartUnit(name, mode string) (dbus.ObjectPath, *dbus.Error) {
	job := dbus.ObjectPath("/org/freedesktop/systemd1/job/1")
	f.restarted <- name + " " + mode
	go func() {
		_ = f.conn.Emit("/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager.JobRemoved", uint32(1), job, name, "done")
	}()
	return job, nil
}

// A private dbus-daemon stands in for the host's system bus.
func privateBus(t *testing.T) string {
	t.Helper()
	daemon, err := exec.LookPath("dbus-daemon")
	if err != nil {
		t.Fatal("dbus-daemon is missing: make node-packages installs it from Debian")
	}
	cmd := exec.Command(daemon, "--session", "--nofork", "--nopidfile", "--print-address=1", "--address=unix:dir="+t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("dbus-daemon did not say its address: %v", err)
	}
	return strings.TrimSpace(line)
}

func TestSystemdRestartsTheUnitOverTheBus(t *testing.T) {
	var fake *fakeSystemd
	r := systemdOnBus(t, func(conn *dbus.Conn) any {
		fake = &fakeSystemd{conn: conn, restarted: make(chan string, 1)}
		return fake
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if got := <-fake.restarted; got != "kubelet.service replace" {
		t.Fatalf("systemd was asked %q, want kubelet.service replace", got)
	}
}

// systemdOnBus serves the manager newFake makes as systemd on a private
// bus, and gives a Systemd restarter that reaches it there.
func systemdOnBus(t *testing.T, newFake func(*dbus.Conn) any) Systemd {
	t.Helper()
	addr := privateBus(t)
	dial := func() (*dbus.Conn, error) {
		conn, err := dbus.Dial(addr)
		if err != nil {
			return nil, err
		}
		if err := conn.Auth(nil); err != nil {
			conn.Close()
			return nil, err
		}
		if err := conn.Hello(); err != nil {
			conn.Close()
			return nil, err
		}
		return conn, nil
	}
	server, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	if err := server.Export(newFake(server), "/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager"); err != nil {
		t.Fatal(err)
	}
	if reply, err := server.RequestName("org.freedesktop.systemd1", dbus.NameFlagDoNotQueue); err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("own the systemd name: %v %v", reply, err)
	}
	return Systemd{Unit: "kubelet.service", Connect: func(context.Context) (*sdbus.Conn, error) { return sdbus.NewConnection(dial) }}
}
