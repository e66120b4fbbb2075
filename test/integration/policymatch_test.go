package integration

import (
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// Each service's Node policy matches exactly the Node resources its role
// may write: one it does not match would be a write RBAC allows and no
// policy holds to its own Node, and one its role cannot write costs the API
// server the policy's match condition on every other writer's update (a
// copy of the Node and of its old value) for nothing, since RBAC refuses
// the service's own first.
func TestTheNodePoliciesMatchWhatTheirRolesWrite(t *testing.T) {
	nodeResources := []string{"nodes", "nodes/status"}
	for role, policy := range map[string]string{
		"nodeconfig-status":     "nodeconfig-status-own-node",
		"nodeconfig-agent":      "nodeconfig-agent-own-node",
		"nodeconfig-reconciler": "nodeconfig-reconciler-abandon-mark",
	} {
		r := clusterRole(t, "rbac.yaml", role)
		p := admissionPolicy(t, "rbac.yaml", policy)
		for _, res := range nodeResources {
			writes := roleWrites(r, res)
			matched := policyMatchesUpdate(p, res)
			switch {
			case writes && !matched:
				t.Errorf("ClusterRole %s may write %s, and policy %s does not match its updates", role, res, policy)
			case !writes && matched:
				t.Errorf("policy %s matches updates of %s, which ClusterRole %s cannot write", policy, res, role)
			}
		}
	}
}

// roleWrites says whether a rule of r lets its subject update or patch
// resource of the core group.
func roleWrites(r *rbacv1.ClusterRole, resource string) bool {
	for _, rule := range r.Rules {
		if !anyOf(rule.APIGroups, "", "*") || !anyOf(rule.Resources, patterns(resource, "*")...) || len(rule.ResourceNames) > 0 {
			continue
		}
		if anyOf(rule.Verbs, "update", "patch", "*") {
			return true
		}
	}
	return false
}

// policyMatchesUpdate says whether p's match constraints take in an update
// of resource of the core group.
func policyMatchesUpdate(p *admissionregistrationv1.ValidatingAdmissionPolicy, resource string) bool {
	if p.Spec.MatchConstraints == nil {
		return false
	}
	for _, rule := range p.Spec.MatchConstraints.ResourceRules {
		ops := make([]string, len(rule.Operations))
		for i, op := range rule.Operations {
			ops[i] = string(op)
		}
		if anyOf(rule.APIGroups, "", "*") && anyOf(rule.Resources, patterns(resource, "*/*")...) && anyOf(ops, "UPDATE", "*") {
			return true
		}
	}
	return false
}

// patterns are the names a rule may give resource by: itself, all, and
// for a subresource its wildcards.
func patterns(resource, all string) []string {
	p := []string{resource, all}
	if res, sub, ok := strings.Cut(resource, "/"); ok {
		p = append(p, res+"/*", "*/"+sub)
	} else if all != "*" {
		p = append(p, "*")
	}
	return p
}

func anyOf(have []string, want ...string) bool {
	return slices.ContainsFunc(have, func(h string) bool { return slices.Contains(want, h) })
}

// clusterRole reads the named ClusterRole from a file of deploy/.
func clusterRole(t *testing.T, file, name string) *rbacv1.ClusterRole {
	t.Helper()
	var r rbacv1.ClusterRole
	deployObject(t, file, "ClusterRole", name, &r)
	return &r
}
