package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/configcheck/fieldpolicy"
	"nodeconfig.io/test/framework/sim"
)

// A NodeConfig that sets a kubelet field the policy refuses is refused
// before any node: ConfigRefused naming the field and why, no checkpoint
// on any node. The same payload sent straight to an agent, as a
// compromised reconciler would, is refused by the agent's own policy, and
// validator: none without the operator's opt-in is refused too.
func TestTheFieldPolicyRefusesCentrallyAndOnTheNode(t *testing.T) {
	e := newNodes(t, 2, func(int) sim.NodeOptions { return sim.NodeOptions{} })
	e.startReconciler("r0")
	good := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(1), "rollout": map[string]any{"maxInTrial": "100%"}})
	for _, n := range e.nodes {
		e.waitNode(n.Name, 30*time.Second, "promoted", func(st corev1.NodeConfigStatus, _ *corev1.NodeCondition) bool {
			return rv(st.LastKnownGood) == good.ResourceVersion
		})
	}

	const anonymous = "maxPods: 110\nauthentication:\n  anonymous:\n    enabled: true\n"
	refused := e.configMap("cfg", map[string]string{"config.yaml": anonymous})
	e.waitNodeConfigCondition(e.label, v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonConfigRefused, 20*time.Second)
	nc, err := e.nodeConfigNow(e.label)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range nc.Status.Conditions {
		if c.Type == v1alpha1.ConditionDegraded && (!strings.Contains(c.Message, "authentication") || !strings.Contains(c.Message, "anonymous access")) {
			t.Fatalf("Degraded says %q; want the field and the policy's reason", c.Message)
		}
	}
	for i, n := range e.nodes {
		list, err := n.Checkpoint().ListCheckpoints(e.ctx, &nodeconfigv1.ListCheckpointsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, cp := range list.GetCheckpoints() {
			if cp.GetSource().GetResourceVersion() == refused.ResourceVersion {
				t.Fatalf("node %s holds a checkpoint of the refused version", n.Name)
			}
		}
		if got, _ := n.Target(); got != goodYAML {
			t.Fatalf("node %s target %q", n.Name, got)
		}
		if a := e.records(i).GetAssigned().GetSource().GetResourceVersion(); a != good.ResourceVersion {
			t.Fatalf("node %s assigned resourceVersion %s; want %s still", n.Name, a, good.ResourceVersion)
		}
	}

	// A compromised reconciler skips its own check and talks to the agent.
	agent := e.nodes[0].Checkpoint()
	straight := &nodeconfigv1.ConfigSource{Namespace: e.ns, Name: "forged", Uid: "forged-uid", ResourceVersion: "1", Key: "config.yaml"}
	if _, err := agent.PutCheckpoint(e.ctx, &nodeconfigv1.PutCheckpointRequest{Source: straight, Data: map[string]string{"config.yaml": anonymous}}); err != nil {
		t.Fatal(err)
	}
	if _, err := agent.SetAssigned(e.ctx, &nodeconfigv1.SetAssignedRequest{Source: straight, SoakSeconds: 1, Validator: nodeconfigv1.Validator_VALIDATOR_YAML}); err != nil {
		t.Fatal(err)
	}
	act, err := agent.Activate(e.ctx, &nodeconfigv1.ActivateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	recs := act.GetRecords()
	if act.GetOutcome() != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ROLLED_BACK || recs.GetError().GetError().GetReason() != records.ReasonRefusedByPolicy {
		t.Fatalf("the agent %v with error %v; want the payload refused by its own policy", act.GetOutcome(), recs.GetError().GetError())
	}
	if got, _ := e.nodes[0].Target(); got != goodYAML {
		t.Fatalf("the agent wrote %q for a payload its policy refuses", got)
	}

	// validator: none, without the operator's opt-in.
	e.configMap("cfg", map[string]string{"config.yaml": goodYAML + "# unvalidated\n"})
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(1), "validator": "none", "rollout": map[string]any{"maxInTrial": "100%"}})
	e.waitNodeConfig(e.label, 20*time.Second, "validator none refused", func(nc *v1alpha1.NodeConfig) bool {
		for _, c := range nc.Status.Conditions {
			if c.Type == v1alpha1.ConditionDegraded && c.Reason == v1alpha1.ReasonConfigRefused && strings.Contains(c.Message, fieldpolicy.ValidatorNoneFlag) {
				return true
			}
		}
		return false
	})
}
