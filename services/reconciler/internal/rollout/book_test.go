package rollout

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
)

var testNow = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func newBook() *Book { return New(func() time.Time { return testNow }) }

// nodeConfig is a NodeConfig with a source and the given trial size.
func nodeConfig(name string, maxInTrial int32) *v1alpha1.NodeConfig {
	n := intstr.FromInt32(maxInTrial)
	return &v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Generation: 1}, Spec: v1alpha1.NodeConfigSpec{
		Source:  &v1alpha1.Source{ConfigMap: &v1alpha1.ConfigMapSource{Namespace: "ns", Name: "cfg", Key: "k"}},
		Rollout: v1alpha1.Rollout{MaxInTrial: &n},
	}}
}

// setState books a sync that found node in state on nc.
func setState(b *Book, node, nc string, state nodeconfigv1.LifecycleState) []string {
	return b.Synced(node, Sync{Facts: Facts{State: state, NodeConfig: nc}})
}

// everyone is an Ask of a NodeConfig selecting n nodes, all seen.
func everyone(n int) Ask { return Ask{Seen: true, Selected: n} }

var (
	waiting    = nodeconfigv1.LifecycleState_LIFECYCLE_STATE_WAITING
	soaking    = nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING
	active     = nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ACTIVE
	failing    = nodeconfigv1.LifecycleState_LIFECYCLE_STATE_FAILING
	rolledBack = nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ROLLED_BACK
)
