package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"nodeconfig.io/services/kubectl-nodeconfig/internal/kube"
)

// syncBuffer is a buffer the command writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// status --watch prints the status, then again when a node changes, and
// ends with exit 0 when interrupted.
func TestStatusWatchPrintsChanges(t *testing.T) {
	f := newFleet(3, func(int) design { return soakingNode })
	c := f.clients()
	addr := serveReconciler(t, &fakeReconciler{states: f.states})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- runWith(ctx, []string{"status", "--watch", "--reconciler", addr}, &stdout, &stderr, func() (*kube.Clients, error) { return c, nil })
	}()
	waitFor := func(what string, cond func(string) bool) {
		t.Helper()
		err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return cond(stdout.String()), nil
		})
		if err != nil {
			t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", what, err, stdout.String(), stderr.String())
		}
	}
	waitFor("the first status", func(s string) bool { return strings.Contains(s, "  nodes: Trial 3\n") })

	// node-0001 rolls back: the status is printed again.
	n, err := c.Kube.CoreV1().Nodes().Get(ctx, nodeName(1), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Conditions[0].Reason, n.Status.Conditions[0].Status = "RolledBack", corev1.ConditionFalse
	if _, err := c.Kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("the status after node-0001 rolled back", func(s string) bool {
		return strings.Contains(s, "\n--- ") && strings.Contains(s, "  nodes: Refused 1, Trial 2\n")
	})
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("status --watch ended with exit %d: %s", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("status --watch did not end when interrupted")
	}
	if n := strings.Count(stdout.String(), "reconciler: "); n != 2 {
		t.Errorf("printed %d times, want 2 (once at start, once per change):\n%s", n, stdout.String())
	}
}

// Shell completion offers the NodeConfigs and the nodes the API server
// has, and status's outcomes for --phase.
func TestCompletionOffersNames(t *testing.T) {
	f := newFleet(3, fleetDesign)
	c := f.clients()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"__complete", "status", ""}, []string{"fleet"}},
		{[]string{"__complete", "pause", "fl"}, []string{"fleet"}},
		{[]string{"__complete", "why", "node-000"}, []string{"node-0000", "node-0001", "node-0002"}},
		{[]string{"__complete", "status", "--phase", ""}, []string{"Refused", "Failed", "Conflict", "Trial", "Waiting", "Active", "Unreported"}},
	} {
		out, stderr, code := runFake(c, tc.args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", tc.args, code, stderr)
		}
		got := strings.Split(strings.TrimSpace(out), "\n")
		// The last line is cobra's directive (:4, no file completion).
		if got[len(got)-1] != ":4" || strings.Join(got[:len(got)-1], " ") != strings.Join(tc.want, " ") {
			t.Errorf("%v completes %q, want %q then :4", tc.args, got, tc.want)
		}
	}
	for _, shell := range []string{"bash", "zsh", "fish"} {
		out, _, code := runFake(c, "completion", shell)
		if code != 0 || !strings.Contains(out, "kubectl-nodeconfig") {
			t.Errorf("completion %s: exit %d, %d bytes", shell, code, len(out))
		}
	}
}

// version prints the client's build, the API server's version, and why
// the reconciler's image is not known when no Lease names a pod.
func TestVersion(t *testing.T) {
	c := newFleet(1, fleetDesign).clients()
	out, stderr, code := runFake(c, "version", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var v VersionResult
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	if v.Client.GoVersion != runtime.Version() || v.Client.Version == "" || v.Server == nil || v.Server.Error != "" || v.Server.GitVersion == "" {
		t.Errorf("version -o json: %+v %+v", v.Client, v.Server)
	}
	if v.Reconciler == nil || !strings.Contains(v.Reconciler.Error, "Lease nodeconfig-system/nodeconfig-reconciler") {
		t.Errorf("reconciler: %+v", v.Reconciler)
	}
	out, _, _ = runFake(c, "version", "--client")
	if !strings.HasPrefix(out, "Client: kubectl-nodeconfig ") || strings.Contains(out, "Server") {
		t.Errorf("version --client: %q", out)
	}
}
