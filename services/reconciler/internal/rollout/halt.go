package rollout

import (
	"slices"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/pacing"
)

// A halt is kept per config version in the NodeConfig's status: the nodes
// that rolled back from a version stay counted after they are deleted or
// their agent goes away, and a new leader reads them back from the API.

const (
	// keptVersions bounds the versions a status remembers (newest last).
	keptVersions = 8
	// KeptNodes bounds the node names kept per version, unless the
	// NodeConfig's maxFailures is higher: the names are what a new leader
	// counts a halt by (the status counts come from the nodes' states), so
	// maxFailures of them hold a halt after the nodes are gone, and more
	// would only lengthen a message.
	KeptNodes = 256
)

// Failures counts the nodes a status's list says rolled back from v.
func Failures(kept []v1alpha1.RolledBackVersion, v Version) int {
	return len(keptRollbacks(kept, v))
}

// keptRollbacks names the nodes a status's list says rolled back from v.
func keptRollbacks(kept []v1alpha1.RolledBackVersion, v Version) map[string]bool {
	out := map[string]bool{}
	for _, rb := range kept {
		if v.is(rb) {
			for _, n := range rb.Nodes {
				out[n] = true
			}
		}
	}
	return out
}

// haltCountLocked counts the nodes known to have rolled back from v: those
// nc's status keeps and those rolled back now.
// Halted says whether v's rollbacks halted it, by the status kept and the
// rollbacks seen since (as Admit judges it).
func (b *Book) Halted(nc *v1alpha1.NodeConfig, v Version) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return pacing.Halted(b.haltCountLocked(nc, v), b.policyLocked(nc).MaxFailures)
}

func (b *Book) haltCountLocked(nc *v1alpha1.NodeConfig, v Version) int {
	nodes := keptRollbacks(nc.Status.RolledBackVersions, v)
	if t := b.trials[nc.Name]; t != nil {
		for name := range t.rolledBack[v] {
			nodes[name] = true
		}
	}
	return len(nodes)
}

// RolledBackVersions is nc's status list: the kept one plus every selected
// node now rolled back, newest versions last.
func (b *Book) RolledBackVersions(nc *v1alpha1.NodeConfig, selected []string) []v1alpha1.RolledBackVersion {
	b.mu.Lock()
	defer b.mu.Unlock()
	kept := max(KeptNodes, b.policyLocked(nc).MaxFailures)
	var out []v1alpha1.RolledBackVersion
	for _, rb := range nc.Status.RolledBackVersions {
		rb.Nodes = slices.Clone(rb.Nodes)
		out = append(out, rb)
	}
	for _, name := range selected {
		s := b.seats[name]
		if s == nil || s.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ROLLED_BACK {
			continue
		}
		v, ok := AssignedVersion(s.Records)
		if !ok {
			continue
		}
		i := slices.IndexFunc(out, v.is)
		if i < 0 {
			out = append(out, v1alpha1.RolledBackVersion{UID: v.UID, ResourceVersion: v.ResourceVersion, Key: v.Key, Validator: v.Validator})
			i = len(out) - 1
		}
		if !slices.Contains(out[i].Nodes, name) && len(out[i].Nodes) < kept {
			out[i].Nodes = append(out[i].Nodes, name)
			slices.Sort(out[i].Nodes)
		}
	}
	if len(out) > keptVersions {
		out = out[len(out)-keptVersions:]
	}
	return out
}
