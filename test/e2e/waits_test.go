package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/test/framework/nodeview"
	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/framework/testenv"
)

// status reads a node's NodeConfigStatus annotation, as users see it.
func (e *env) status(node string) (corev1.NodeConfigStatus, *corev1.NodeCondition, error) {
	return nodeview.Read(e.ctx, e.c.Client, node)
}

// waitNode waits until check accepts the node's status and condition.
func (e *env) waitNode(node string, timeout time.Duration, what string, check func(st corev1.NodeConfigStatus, cond *corev1.NodeCondition) bool) {
	e.t.Helper()
	testenv.WaitNode(e.t, e.c.Client, node, timeout, what, check)
}

func rv(src *corev1.NodeConfigSource) string { return nodeview.ResourceVersion(src) }

func reasonIs(cond *corev1.NodeCondition, reason string) bool {
	return cond != nil && cond.Reason == reason
}

func (e *env) records(i int) *nodeconfigv1.Records {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	resp, err := e.nodes[i].Checkpoint().GetRecords(ctx, &nodeconfigv1.GetRecordsRequest{}, grpc.WaitForReady(true))
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.GetRecords()
}

func (e *env) nodeState(name string) *nodeconfigv1.NodeState {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	resp, err := e.reconciler.Client().GetNode(ctx, &nodeconfigv1.GetNodeRequest{NodeName: name})
	if err != nil {
		return nil
	}
	return resp.GetNode()
}

// waitState waits for the reconciler to report a lifecycle state for a node.
func (e *env) waitState(name string, timeout time.Duration, want nodeconfigv1.LifecycleState) *nodeconfigv1.NodeState {
	e.t.Helper()
	var got *nodeconfigv1.NodeState
	err := proc.WaitFor(timeout, func() (bool, error) {
		got = e.nodeState(name)
		return got.GetState() == want, nil
	})
	if err != nil {
		e.t.Fatalf("node %s: state %v, want %v: %v", name, got.GetState(), want, err)
	}
	return got
}

// events lists Events about an object with the given reason.
func (e *env) events(t testing.TB, kind, name, reason string) []corev1.Event {
	t.Helper()
	sel := fields.Set{"involvedObject.kind": kind, "involvedObject.name": name, "reason": reason}.AsSelector().String()
	list, err := e.c.Client.CoreV1().Events("").List(e.ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// waitEventNaming waits for an Event about an object with the given reason
// whose message contains what, and returns it: Events outlive the objects
// they are about, so a rerun of a test (-count) sees its earlier run's.
func (e *env) waitEventNaming(kind, name, reason, what string, timeout time.Duration) corev1.Event {
	e.t.Helper()
	var found corev1.Event
	err := proc.WaitFor(timeout, func() (bool, error) {
		for _, ev := range e.events(e.t, kind, name, reason) {
			if strings.Contains(ev.Message, what) {
				found = ev
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		e.t.Fatalf("no %s event on %s %s naming %q: %v", reason, kind, name, what, err)
	}
	return found
}

func (e *env) waitEvent(kind, name, reason string, timeout time.Duration) {
	e.t.Helper()
	err := proc.WaitFor(timeout, func() (bool, error) { return len(e.events(e.t, kind, name, reason)) > 0, nil })
	if err != nil {
		e.t.Fatalf("no %s event on %s %s: %v", reason, kind, name, err)
	}
}
