package controller

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
)

// poolA is a NodeConfig over the nodes labelled pool=a, with ConfigMap
// ns/cfg key k.
func poolA(name string, rollout v1alpha1.Rollout) *v1alpha1.NodeConfig {
	return &v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: []string{v1alpha1.Finalizer}}, Spec: v1alpha1.NodeConfigSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}},
		Source:       &v1alpha1.Source{ConfigMap: &v1alpha1.ConfigMapSource{Namespace: "ns", Name: "cfg", Key: "k"}},
		SoakSeconds:  60,
		Rollout:      rollout,
	}}
}

func (f *fixture) state(node string) nodeconfigv1.LifecycleState {
	info, _ := f.c.NodeInfo(node)
	return info.State
}

func (f *fixture) syncAll(nodes ...string) {
	f.t.Helper()
	for _, n := range nodes {
		_ = f.syncNode(n) // an agent that cannot be reached is an error here
	}
}

// condition syncs the NodeConfig's status and returns one condition.
func (f *fixture) condition(nc, typ string) *metav1.Condition {
	f.t.Helper()
	f.syncNodeConfig(nc)
	return meta.FindStatusCondition(f.storedNodeConfig(nc).Status.Conditions, typ)
}

// Each admission outcome, and each reason the NodeConfig's conditions
// give, from one sync of its nodes and one of its status.
func TestAdmissionOutcomesAndStatusReasons(t *testing.T) {
	one := intstr.FromInt32(1)
	two := intstr.FromInt32(2)
	for _, tc := range []struct {
		name    string
		setup   func(f *fixture)
		states  map[string]nodeconfigv1.LifecycleState
		typ     string // the condition checked
		status  metav1.ConditionStatus
		reason  string
		checkNC func(t *testing.T, nc *v1alpha1.NodeConfig)
	}{
		{
			name: "admitted up to maxInTrial, the rest wait",
			setup: func(f *fixture) {
				f.setNodeConfig(poolA("nc", v1alpha1.Rollout{MaxInTrial: &one}))
				f.syncAll("n1", "n2", "n3") // n1 and n2 wait for n3 to be seen
				f.syncAll("n1", "n2", "n3")
			},
			states: map[string]nodeconfigv1.LifecycleState{"n2": nodeconfigv1.LifecycleState_LIFECYCLE_STATE_WAITING},
			typ:    v1alpha1.ConditionProgressing, status: metav1.ConditionTrue, reason: "RollingOut",
			checkNC: func(t *testing.T, nc *v1alpha1.NodeConfig) {
				if nc.Status.Soaking != 1 || nc.Status.Waiting != 2 {
					t.Errorf("soaking %d waiting %d, want 1 and 2 (maxInTrial 1)", nc.Status.Soaking, nc.Status.Waiting)
				}
			},
		},
		{
			name: "a node not seen since the start holds admission",
			setup: func(f *fixture) {
				f.setNodeConfig(poolA("nc", v1alpha1.Rollout{MaxInTrial: &two}))
				f.syncAll("n1")
			},
			states: map[string]nodeconfigv1.LifecycleState{"n1": nodeconfigv1.LifecycleState_LIFECYCLE_STATE_WAITING},
			typ:    v1alpha1.ConditionReady, status: metav1.ConditionFalse, reason: "RollingOut",
		},
		{
			name: "complete",
			setup: func(f *fixture) {
				f.setNodeConfig(poolA("nc", v1alpha1.Rollout{}))
				for range 8 {
					f.syncAll("n1", "n2", "n3")
					f.now = f.now.Add(61 * time.Second)
				}
			},
			states: map[string]nodeconfigv1.LifecycleState{"n1": nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ACTIVE, "n3": nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ACTIVE},
			typ:    v1alpha1.ConditionReady, status: metav1.ConditionTrue, reason: "AllNodesActive",
		},
		{
			name: "halted after maxFailures rollbacks",
			setup: func(f *fixture) {
				f.agents.agents["n1"].lateError = true
				f.agents.agents["n2"].lateError = true
				f.agents.agents["n3"].lateError = true
				f.setNodeConfig(poolA("nc", v1alpha1.Rollout{MaxInTrial: &one}))
				f.syncAll("n1", "n2", "n3")
				f.syncAll("n1", "n2", "n3")
				f.syncAll("n1", "n2", "n3")
			},
			states: map[string]nodeconfigv1.LifecycleState{"n2": nodeconfigv1.LifecycleState_LIFECYCLE_STATE_HALTED},
			typ:    v1alpha1.ConditionDegraded, status: metav1.ConditionTrue, reason: v1alpha1.ReasonRolloutHalted,
		},
		{
			name: "paused",
			setup: func(f *fixture) {
				f.setNodeConfig(poolA("nc", v1alpha1.Rollout{Paused: true}))
				f.syncAll("n1", "n2", "n3")
				f.syncAll("n1", "n2", "n3")
			},
			states: map[string]nodeconfigv1.LifecycleState{"n1": nodeconfigv1.LifecycleState_LIFECYCLE_STATE_WAITING},
			typ:    v1alpha1.ConditionProgressing, status: metav1.ConditionFalse, reason: v1alpha1.ReasonPaused,
		},
		{
			name: "outside every maintenance window",
			setup: func(f *fixture) {
				// The fixture's clock is 12:00 UTC; the window is 02:00-04:00.
				f.setNodeConfig(poolA("nc", v1alpha1.Rollout{Windows: []v1alpha1.Window{{Start: "02:00", End: "04:00"}}}))
				f.syncAll("n1", "n2", "n3")
				f.syncAll("n1", "n2", "n3")
			},
			states: map[string]nodeconfigv1.LifecycleState{"n1": nodeconfigv1.LifecycleState_LIFECYCLE_STATE_WAITING},
			typ:    v1alpha1.ConditionProgressing, status: metav1.ConditionFalse, reason: v1alpha1.ReasonOutsideWindow,
			checkNC: func(t *testing.T, nc *v1alpha1.NodeConfig) {
				if want := time.Date(2026, 11, 23, 2, 0, 0, 0, time.UTC); nc.Status.NextWindow == nil || !nc.Status.NextWindow.Time.Equal(want) {
					t.Errorf("nextWindow %v, want %v", nc.Status.NextWindow, want)
				}
			},
		},
		{
			name: "a window that does not parse",
			setup: func(f *fixture) {
				f.setNodeConfig(poolA("nc", v1alpha1.Rollout{Windows: []v1alpha1.Window{{Start: "02:00", End: "04:00", TimeZone: "Mars/Olympus"}}}))
				f.syncAll("n1", "n2", "n3")
			},
			typ: v1alpha1.ConditionDegraded, status: metav1.ConditionTrue, reason: v1alpha1.ReasonInvalidWindow,
		},
		{
			name: "a CEL health gate that does not compile",
			setup: func(f *fixture) {
				nc := poolA("nc", v1alpha1.Rollout{})
				nc.Spec.Health = &v1alpha1.HealthGates{CEL: "node.status.conditions.exists(c,"}
				f.setNodeConfig(nc)
				f.syncAll("n1", "n2", "n3")
			},
			states: map[string]nodeconfigv1.LifecycleState{"n1": nodeconfigv1.LifecycleState_LIFECYCLE_STATE_WAITING},
			typ:    v1alpha1.ConditionDegraded, status: metav1.ConditionTrue, reason: v1alpha1.ReasonInvalidHealthGate,
		},
		{
			name: "refused by central validation",
			setup: func(f *fixture) {
				f.addConfigMap("ns", "cfg", "11", map[string]string{"k": "maxPods: [1\n"})
				f.setNodeConfig(poolA("nc", v1alpha1.Rollout{}))
				f.syncAll("n1", "n2", "n3")
			},
			states: map[string]nodeconfigv1.LifecycleState{"n1": nodeconfigv1.LifecycleState_LIFECYCLE_STATE_LOCAL_DEFAULT},
			typ:    v1alpha1.ConditionReady, status: metav1.ConditionFalse, reason: v1alpha1.ReasonConfigRefused,
		},
		{
			name: "selector conflict",
			setup: func(f *fixture) {
				f.setNodeConfig(poolA("nc", v1alpha1.Rollout{}))
				f.setNodeConfig(poolA("other", v1alpha1.Rollout{}))
				f.syncAll("n1", "n2", "n3")
			},
			states: map[string]nodeconfigv1.LifecycleState{"n1": nodeconfigv1.LifecycleState_LIFECYCLE_STATE_CONFLICT},
			typ:    v1alpha1.ConditionDegraded, status: metav1.ConditionTrue, reason: v1alpha1.ReasonSelectorConflict,
		},
		{
			name: "a node failing with retries",
			setup: func(f *fixture) {
				delete(f.agents.agents, "n2") // its agent cannot be reached
				f.setNodeConfig(poolA("nc", v1alpha1.Rollout{}))
				f.syncAll("n1", "n2", "n3")
			},
			states: map[string]nodeconfigv1.LifecycleState{"n2": nodeconfigv1.LifecycleState_LIFECYCLE_STATE_FAILING},
			typ:    v1alpha1.ConditionDegraded, status: metav1.ConditionTrue, reason: "NodesFailing",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			for _, n := range []string{"n1", "n2", "n3"} {
				f.addNode(n, map[string]string{"pool": "a"})
			}
			f.addConfigMap("ns", "cfg", "10", map[string]string{"k": "maxPods: 1\n"})
			tc.setup(f)
			for node, want := range tc.states {
				if got := f.state(node); got != want {
					t.Errorf("%s is %v, want %v", node, got, want)
				}
			}
			c := f.condition("nc", tc.typ)
			if c == nil || c.Status != tc.status || c.Reason != tc.reason {
				t.Fatalf("%s condition %+v, want %s/%s", tc.typ, c, tc.status, tc.reason)
			}
			if tc.checkNC != nil {
				tc.checkNC(t, f.storedNodeConfig("nc"))
			}
		})
	}
}

// Workers syncing the nodes of one NodeConfig at the same time never admit
// more than maxInTrial of them (run under -race in make test).
func TestWorkersRacingOnOneNodeConfigRespectMaxInTrial(t *testing.T) {
	f := newFixture(t)
	var names []string
	for i := range 20 {
		name := fmt.Sprintf("n%02d", i)
		names = append(names, name)
		f.addNode(name, map[string]string{"pool": "a"})
	}
	f.addConfigMap("ns", "cfg", "10", map[string]string{"k": "maxPods: 1\n"})
	three := intstr.FromInt32(3)
	f.setNodeConfig(poolA("nc", v1alpha1.Rollout{MaxInTrial: &three}))
	f.syncAll(names...) // every node seen once
	for round := range 3 {
		var wg sync.WaitGroup
		for _, n := range names {
			wg.Go(func() { _ = f.syncNode(n) })
		}
		wg.Wait()
		onTrial := 0
		for _, n := range names {
			if f.state(n) == nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING {
				onTrial++
			}
		}
		if onTrial != 3 {
			t.Fatalf("round %d: %d nodes soaking after 20 concurrent syncs, want exactly maxInTrial 3", round, onTrial)
		}
	}
}
