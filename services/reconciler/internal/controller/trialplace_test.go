package controller

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
)

// trialFixture is three pool=a nodes, ConfigMap ns/cfg and NodeConfig nc
// with rollout r, nothing synced yet.
func trialFixture(t *testing.T, r v1alpha1.Rollout) (*fixture, map[string]*fakeAgent) {
	t.Helper()
	f := newFixture(t)
	agents := map[string]*fakeAgent{}
	for _, n := range poolANodes {
		agents[n] = f.addNode(n, map[string]string{"pool": "a"})
	}
	f.addConfigMap("ns", "cfg", "10", map[string]string{"k": "maxPods: 1\n"})
	f.setNodeConfig(poolA("nc", r))
	return f, agents
}

// states lists the nodes' lifecycle states in c, in order.
func states(c *Controller, nodes ...string) string {
	var out []string
	for _, n := range nodes {
		info, _ := c.NodeInfo(n)
		out = append(out, fmt.Sprintf("%s=%v", n, info.State))
	}
	return fmt.Sprint(out)
}

// assigned names the nodes whose agents have a config assigned.
func assigned(agents map[string]*fakeAgent, nodes ...string) (out []string) {
	for _, n := range nodes {
		if agents[n].records().GetAssigned() != nil {
			out = append(out, n)
		}
	}
	return out
}

var errDiskFull = status.Error(codes.ResourceExhausted, "no space left on device")

// An admitted node that fails before its trial starts (nothing of the
// version assigned on it) gives its place back, so one broken node does
// not stall a paced rollout.
func TestANodeFailingBeforeItsTrialGivesItsPlaceBack(t *testing.T) {
	one := intstr.FromInt32(1)
	f, agents := trialFixture(t, v1alpha1.Rollout{MaxInTrial: &one})
	agents["n1"].failPuts(errDiskFull)
	f.syncAll("n2", "n3", "n1") // n2 and n3 wait for n1 to be seen; n1 is admitted and fails
	if got := f.state("n1"); got != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_FAILING {
		t.Fatalf("setup: n1 is %v, want FAILING", got)
	}
	if got := drain(f.c.nodeQ); !slices.ContainsFunc(got, func(n string) bool { return n == "n2" || n == "n3" }) {
		t.Errorf("n1's failure woke %v; want a waiting node woken by the place it gave back", got)
	}
	f.syncAll("n2", "n3")
	if got := assigned(agents, poolANodes...); len(got) != 1 || got[0] == "n1" {
		t.Fatalf("with n1 failing before its trial started, assigned %v (%s); want one of n2, n3 (maxInTrial 1)", got, states(f.c, poolANodes...))
	}
	// n1 heals: it waits for a place like any other node.
	agents["n1"].failPuts(nil)
	f.syncAll("n1")
	if got := f.state("n1"); got != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_WAITING {
		t.Fatalf("n1 healed while another node soaks is %v; want WAITING", got)
	}
}

// A node whose sync fails once its trial started (its agent unreachable
// mid-soak) keeps its place, also in a new reconciler that saw it soaking.
func TestABlipDuringTheSoakKeepsThePlace(t *testing.T) {
	one := intstr.FromInt32(1)
	f, agents := trialFixture(t, v1alpha1.Rollout{MaxInTrial: &one})
	f.syncAll("n2", "n3", "n1")
	if got := assigned(agents, poolANodes...); !slices.Equal(got, []string{"n1"}) {
		t.Fatalf("setup: assigned %v, want n1", got)
	}
	reachable := func(ok bool) {
		f.agents.mu.Lock()
		defer f.agents.mu.Unlock()
		if ok {
			f.agents.agents["n1"] = agents["n1"]
		} else {
			delete(f.agents.agents, "n1")
		}
	}
	reachable(false)
	f.syncAll("n1", "n2", "n3")
	if got := assigned(agents, poolANodes...); len(got) != 1 {
		t.Fatalf("with n1 unreachable mid-soak, assigned %v (%s); want only n1", got, states(f.c, poolANodes...))
	}
	reachable(true)
	fresh := New(f.c.o)
	t.Cleanup(func() { fresh.nodeQ.ShutDown(); fresh.ncQ.ShutDown() })
	syncAll := func(nodes ...string) {
		for _, n := range nodes {
			_, _ = fresh.syncNode(t.Context(), n) // an unreachable agent is an error here
		}
	}
	syncAll(poolANodes...)
	reachable(false)
	syncAll(poolANodes...)
	if got := assigned(agents, poolANodes...); len(got) != 1 {
		t.Fatalf("a new reconciler with n1 unreachable mid-soak assigned %v (%s); want only n1", got, states(fresh, poolANodes...))
	}
}

// A node whose activation fails after its assignment was recorded (its
// agent gone mid-call) keeps its place: the next sync activates without
// asking admission.
func TestANodeAssignedButNotActivatedKeepsItsPlace(t *testing.T) {
	one := intstr.FromInt32(1)
	f, agents := trialFixture(t, v1alpha1.Rollout{MaxInTrial: &one})
	a := agents["n1"]
	a.mu.Lock()
	a.activateErr = status.Error(codes.Unavailable, "connection reset")
	a.mu.Unlock()
	f.syncAll("n2", "n3", "n1")
	if got := f.state("n1"); got != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_FAILING || a.records().GetAssigned() == nil {
		t.Fatalf("setup: n1 is %v with %v assigned, want FAILING with the config assigned", got, a.records().GetAssigned())
	}
	f.syncAll("n2", "n3")
	if got := assigned(agents, poolANodes...); !slices.Equal(got, []string{"n1"}) {
		t.Fatalf("with n1 assigned but not activated, assigned %v (%s); want only n1 (maxInTrial 1)", got, states(f.c, poolANodes...))
	}
}

// A node admitted and then failing early retries through admission: a
// pause, a closed window or a halt that came meanwhile holds its retry.
func TestARetryOfAnAdmittedNodeHonoursPauseWindowsAndHalt(t *testing.T) {
	for name, hold := range map[string]func(f *fixture, agents map[string]*fakeAgent){
		"paused": func(f *fixture, _ map[string]*fakeAgent) {
			nc := f.storedNodeConfig("nc")
			nc.Generation++ // a spec change, as the API server counts it
			nc.Spec.Rollout.Paused = true
			f.setNodeConfig(nc)
		},
		"outside every window": func(f *fixture, _ map[string]*fakeAgent) {
			// The fixture's clock is 12:00 UTC.
			nc := f.storedNodeConfig("nc")
			nc.Generation++
			nc.Spec.Rollout.Windows = []v1alpha1.Window{{Start: "02:00", End: "04:00"}}
			f.setNodeConfig(nc)
		},
		"halted": func(f *fixture, agents map[string]*fakeAgent) {
			agents["n2"].lateError = true
			f.syncAll("n2")
			if got := f.state("n2"); got != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ROLLED_BACK {
				f.t.Fatalf("setup: n2 is %v, want ROLLED_BACK", got)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			two := intstr.FromInt32(2)
			f, agents := trialFixture(t, v1alpha1.Rollout{MaxInTrial: &two})
			agents["n1"].failPuts(errDiskFull)
			f.syncAll("n2", "n3", "n1")
			if got := f.state("n1"); got != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_FAILING {
				t.Fatalf("setup: n1 is %v, want FAILING", got)
			}
			hold(f, agents)
			agents["n1"].failPuts(nil)
			f.syncAll("n1")
			if got := agents["n1"].records().GetAssigned(); got != nil {
				t.Fatalf("n1's retry %s assigned %v (%s)", name, records.Describe(got.GetSource()), states(f.c, "n1"))
			}
		})
	}
}

// A node on trial of NodeConfig A that another NodeConfig also selects
// keeps counting against A's maxInTrial while it soaks A's version, and
// its place frees when the soak ends.
func TestAConflictedNodeSoakingKeepsItsPlace(t *testing.T) {
	one := intstr.FromInt32(1)
	f, agents := trialFixture(t, v1alpha1.Rollout{MaxInTrial: &one})
	f.syncAll("n2", "n3", "n1")
	if got := f.state("n1"); got != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING {
		t.Fatalf("setup: n1 is %v, want SOAKING", got)
	}
	// n1 gets a label another NodeConfig selects.
	if err := f.nodes.Update(nodeMeta(metav1.ObjectMeta{Name: "n1", UID: "uid-n1", Labels: map[string]string{"pool": "a", "gpu": "yes"}})); err != nil {
		t.Fatal(err)
	}
	f.c.nodesChanged()
	other := poolA("other", v1alpha1.Rollout{})
	other.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"gpu": "yes"}}
	f.setNodeConfig(other)
	f.syncAll("n1", "n2", "n3")
	if got := f.state("n1"); got != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_CONFLICT {
		t.Fatalf("setup: n1 is %v, want CONFLICT", got)
	}
	if got := assigned(agents, poolANodes...); !slices.Equal(got, []string{"n1"}) {
		t.Fatalf("with n1 conflicted but soaking nc's version, assigned %v (%s); want only n1 (maxInTrial 1)", got, states(f.c, poolANodes...))
	}
	drain(f.c.nodeQ)
	f.now = f.now.Add(61 * time.Second)
	f.syncAll("n1")
	if lkg := agents["n1"].records().GetLastKnownGood(); lkg == nil {
		t.Fatal("setup: n1 was not promoted at its soak's end")
	}
	if got := drain(f.c.nodeQ); !slices.ContainsFunc(got, func(n string) bool { return n == "n2" || n == "n3" }) {
		t.Errorf("n1's soak end woke %v; want a node waiting on nc", got)
	}
	f.syncAll("n2", "n3")
	if got := assigned(agents, poolANodes...); len(got) != 2 {
		t.Fatalf("after n1's soak, assigned %v (%s); want n1 and one more", got, states(f.c, poolANodes...))
	}
}
