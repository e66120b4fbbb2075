package agents

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

func agentPod(name, node, ip string, ready bool) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "nodeconfig-system"},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{PodIP: ip, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	}
}

// agentPods indexes node-a's ready agent Pod and node-b's unready one.
func agentPods(t *testing.T) cache.Indexer {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, p := range []*corev1.Pod{
		agentPod("agent-a", "node-a", "10.0.0.1", true),
		agentPod("agent-b", "node-b", "10.0.0.2", false),
	} {
		if err := idx.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	return idx
}

func TestTargetFromTheReadyAgentPodOnTheNode(t *testing.T) {
	idx := agentPods(t)
	pool := New(Options{Pods: corelisters.NewPodLister(idx), PodSelector: labels.Everything(), Port: 7601})
	defer pool.Close()
	if got, err := pool.Target("node-a"); err != nil || got != "10.0.0.1:7601" {
		t.Fatalf("node-a: %q %v", got, err)
	}
	if _, err := pool.Target("node-b"); err == nil {
		t.Fatal("a not-ready agent pod was used")
	}
	if _, err := pool.Target("node-c"); err == nil {
		t.Fatal("a node without an agent pod got a target")
	}
	// The agent pod is replaced with a new IP: the pool dials the new one.
	if _, _, err := pool.For("node-a"); err != nil {
		t.Fatal(err)
	}
	if err := idx.Update(agentPod("agent-a", "node-a", "10.0.0.9", true)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := pool.For("node-a"); err != nil {
		t.Fatal(err)
	}
	if got, _ := pool.conn("node-a"); got.target != "10.0.0.9:7601" {
		t.Fatalf("connection still to %s after the pod moved", got.target)
	}
}

func TestStaticAddressesAndSocketTemplate(t *testing.T) {
	pool := New(Options{Static: map[string]string{"n1": "127.0.0.1:1"}, SocketTemplate: "/run/{node}/ck.sock"})
	if got, _ := pool.Target("n1"); got != "127.0.0.1:1" {
		t.Fatalf("static: %q", got)
	}
	if got, _ := pool.Target("n2"); got != "unix:///run/n2/ck.sock" {
		t.Fatalf("template: %q", got)
	}
}

// The pool keeps at most MaxConnections open, closing the least recently
// used, so the reconciler's memory does not grow with the fleet.
func TestPoolClosesLeastRecentlyUsedBeyondTheBound(t *testing.T) {
	pool := New(Options{SocketTemplate: "/run/{node}/ck.sock", MaxConnections: 2})
	defer pool.Close()
	for _, n := range []string{"n1", "n2", "n1", "n3"} {
		if _, _, err := pool.For(n); err != nil {
			t.Fatal(err)
		}
	}
	if pool.conns.Len() != 2 {
		t.Fatalf("%d connections open, want 2", pool.conns.Len())
	}
	if _, ok := pool.conn("n2"); ok {
		t.Fatal("n2, the least recently used, is still open")
	}
	for _, n := range []string{"n1", "n3"} {
		if _, ok := pool.conn(n); !ok {
			t.Fatalf("%s was closed", n)
		}
	}
}

// A connection the pool evicts while a sync still uses it stays usable
// until that sync releases it, and is closed then.
func TestEvictedConnectionStaysOpenUntilReleased(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer() // no CheckpointService: calls answer Unimplemented
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	pool := New(Options{Static: map[string]string{"a": "unix://" + sock, "b": "unix://" + sock}, MaxConnections: 1})
	defer pool.Close()
	inUse, release, err := pool.For("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := pool.For("b"); err != nil { // evicts a's connection
		t.Fatal(err)
	}
	if _, ok := pool.conn("a"); ok {
		t.Fatal("setup: a's connection was not evicted")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := inUse.GetRecords(ctx, &nodeconfigv1.GetRecordsRequest{}, grpc.WaitForReady(true)); status.Code(err) != codes.Unimplemented {
		t.Fatalf("a call on the evicted but held connection: %v, want it to reach the server (Unimplemented)", err)
	}
	release()
	if _, err := inUse.GetRecords(ctx, &nodeconfigv1.GetRecordsRequest{}); status.Code(err) != codes.Canceled {
		t.Fatalf("after release: %v, want the connection closed (Canceled)", err)
	}
}
