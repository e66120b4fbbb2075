package e2e

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/test/proc"
)

func (e *env) use(name, cmName string, extra map[string]any) {
	e.t.Helper()
	spec := map[string]any{
		"source":      map[string]any{"configMap": map[string]any{"namespace": e.ns, "name": cmName, "key": "config.yaml"}},
		"soakSeconds": int64(2),
	}
	for k, v := range extra {
		spec[k] = v
	}
	e.nodeConfig(name, spec, nil)
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

func (e *env) waitEvent(kind, name, reason string, timeout time.Duration) {
	e.t.Helper()
	err := proc.WaitFor(timeout, func() (bool, error) { return len(e.events(e.t, kind, name, reason)) > 0, nil })
	if err != nil {
		e.t.Fatalf("no %s event on %s %s: %v", reason, kind, name, err)
	}
}

func unstructuredConditions(obj map[string]any) ([]metav1.Condition, bool, error) {
	status, _ := obj["status"].(map[string]any)
	raw, ok := status["conditions"].([]any)
	if !ok {
		return nil, false, nil
	}
	var out []metav1.Condition
	for _, r := range raw {
		m, _ := r.(map[string]any)
		c := metav1.Condition{}
		c.Type, _ = m["type"].(string)
		s, _ := m["status"].(string)
		c.Status = metav1.ConditionStatus(s)
		c.Reason, _ = m["reason"].(string)
		c.Message, _ = m["message"].(string)
		out = append(out, c)
	}
	return out, true, nil
}
