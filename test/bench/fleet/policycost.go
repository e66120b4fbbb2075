package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/test/framework/proc"
)

// The agents' admission policy matches every update of a Node, whoever
// sends it: RBAC cannot name the agents' own Node, so the policy's match
// conditions pick the agents out, and the API server prepares the Node for
// them on every update, the kubelets' too. policyCost measures what that
// costs a write that is not the agents': the API server's CPU per write of
// the probe (the admin's merge patches of Node status), with the policy
// bound and then unbound, one right after the other; the binding is
// restored after.
type policyCost struct {
	with, without float64 // the API server's CPU per write, µs
}

func (p policyCost) String() string {
	return fmt.Sprintf("the API server's CPU per Node write not the agents': %.0f µs with the agents' admission policy bound, %.0f µs without (%+.0f µs)",
		p.with, p.without, p.with-p.without)
}

// measurePolicyCost takes the API server's CPU per admin write with the
// policy bound from the admin's probe that ran just before (with), and
// measures it again with the policy unbound.
func measurePolicyCost(ctx context.Context, kube *rest.Config, admin kubernetes.Interface, probe *policyProbe, n, apiServerPid int, window time.Duration, with float64) (policyCost, error) {
	p := policyCost{with: with}
	bindings := admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	bound, err := bindings.Get(ctx, agentPolicy, metav1.GetOptions{})
	if err != nil {
		return p, err
	}
	if err := bindings.Delete(ctx, agentPolicy, metav1.DeleteOptions{}); err != nil {
		return p, err
	}
	if err := probe.wait(ctx, false); err != nil {
		return p, err
	}
	unbound, err := adminCeiling(ctx, kube, n, window, apiServerPid)
	if err != nil {
		return p, err
	}
	p.without = unbound.cpuPerWrite
	restored := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: bound.Name, Labels: bound.Labels},
		Spec:       bound.Spec,
	}
	if _, err := bindings.Create(ctx, restored, metav1.CreateOptions{}); err != nil {
		return p, err
	}
	return p, probe.wait(ctx, true)
}

// policyProbe tells whether statusd's admission policy is in force: it is
// when node 0's statusd token may not write node 1's status (a dry run:
// nothing is written either way).
type policyProbe struct{ agent kubernetes.Interface }

func newPolicyProbe(ctx context.Context, kube *rest.Config) (*policyProbe, error) {
	tokens, err := nodeTokens(ctx, kube, statusAccount, 0, 1)
	if err != nil {
		return nil, err
	}
	agent, err := kubernetes.NewForConfig(asAgent(kube, tokens[0]))
	if err != nil {
		return nil, err
	}
	return &policyProbe{agent: agent}, nil
}

// wait waits until the policy is in force (inForce) or out of it: the API
// server takes a policy's binding up, or drops it, in the background.
func (p *policyProbe) wait(ctx context.Context, inForce bool) error {
	patch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.NodeAnnotationConfigStatus + `":"{}"}}}`)
	const refusal = "may only write the Node it runs on"
	return proc.WaitFor(30*time.Second, func() (bool, error) {
		_, err := p.agent.CoreV1().Nodes().Patch(ctx, nodeName(1), types.MergePatchType, patch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}, "status")
		refused := err != nil && strings.Contains(err.Error(), refusal)
		if inForce == refused && (refused || err == nil) {
			return true, nil
		}
		want := "allowed (the policy unbound)"
		if inForce {
			want = "refused: " + refusal
		}
		return false, fmt.Errorf("node %s's statusd token patching %s's status: got %v, want %s", nodeName(0), nodeName(1), err, want)
	})
}
