// Package testenv is what e2e and integration tests share on top of the
// control plane (test/framework/cluster): a short scratch directory,
// simulated nodes that stop and leave no Node behind, and waits on what a
// Node says about its config.
package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"nodeconfig.io/test/framework/cluster"
	"nodeconfig.io/test/framework/nodeview"
	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/framework/sim"
)

// ScratchDir is a fresh directory under /tmp, kept when the test fails so its
// logs can be read. Not t.TempDir(): unix socket paths under it must stay
// within 108 bytes.
func ScratchDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			_ = os.RemoveAll(dir)
		}
	})
	return dir
}

// StartNode starts a simulated node's agent (checkpointd and statusd) under
// root. Stop it with StopNode, or let the test's end do it.
func StartNode(t testing.TB, c *cluster.Cluster, root, name string, o sim.NodeOptions) *sim.Node {
	t.Helper()
	n, err := sim.StartNodeWith(context.Background(), c, root, name, o)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// StopNode stops the node's agent and deletes its Node, logging the agent's
// output first when the test has failed.
func StopNode(t testing.TB, c *cluster.Cluster, n *sim.Node) {
	if t.Failed() {
		t.Log(n.Logs())
	}
	n.Stop()
	_ = c.Client.CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{})
}

// WaitNode waits until check accepts the node's NodeConfigStatus annotation
// and NodeConfigReady condition, and fails the test with the last seen ones
// when timeout passes first.
func WaitNode(t testing.TB, client kubernetes.Interface, node string, timeout time.Duration, what string, check func(st corev1.NodeConfigStatus, cond *corev1.NodeCondition) bool) {
	t.Helper()
	var last string
	err := proc.WaitFor(timeout, func() (bool, error) {
		st, cond, err := nodeview.Read(context.Background(), client, node)
		if err != nil {
			return false, err
		}
		b, _ := json.Marshal(st)
		last = fmt.Sprintf("status %s condition %s/%s %q", b, cond.Status, cond.Reason, cond.Message)
		return check(st, cond), nil
	})
	if err != nil {
		t.Fatalf("node %s: waiting for %s: %v (last: %s)", node, what, err, last)
	}
}

// WaitReason waits for the node's NodeConfigReady condition to have reason.
func WaitReason(t testing.TB, client kubernetes.Interface, node, reason string, timeout time.Duration) {
	t.Helper()
	WaitNode(t, client, node, timeout, "reason "+reason, func(_ corev1.NodeConfigStatus, cond *corev1.NodeCondition) bool {
		return cond.Reason == reason
	})
}
