package guard

import (
	"net"
	"path/filepath"
	"testing"
)

// A kubelet that cannot start for want of a container runtime says nothing
// of its config: while the runtime's socket takes no connection the guard
// counts no start, and once it does the count goes on.
func TestStartsWithTheRuntimeDownAreNotCounted(t *testing.T) {
	n := newNode(t)
	sock := filepath.Join(t.TempDir(), "containerd.sock")
	tr := n.trial("uid-1", good)
	tr.RuntimeEndpoint = "unix://" + sock
	n.activate(tr, bad)
	for range 6 {
		if o := Check(n.dir, t0); o.Action != RuntimeDown {
			t.Fatalf("with no runtime listening: %+v; want %v, nothing counted", o, RuntimeDown)
		}
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	n.start(Counted, 1)
	n.start(Counted, 2)
	n.start(Counted, 3)
	n.start(FellBack, 4)
}
