package cli

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	ncfake "nodeconfig.io/services/api/client/clientset/fake"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/kube"
)

// A fleet for the plugin: fake API clients holding Nodes and NodeConfigs,
// and a reconciler on 127.0.0.1 answering ListNodes from a map.

// design is what a test node is made to be: the NodeConfigReady reason
// and status it reports, the reconciler's state of it, and the group a
// person would put it in (the test's truth, written down here, not
// computed by the plugin's code).
type design struct {
	phase, ready string
	state        nodeconfigv1.LifecycleState
	group        string
}

var (
	activeNode     = design{"Active", "True", nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ACTIVE, "Active"}
	soakingNode    = design{"Soaking", "True", nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING, "Trial"}
	heldNode       = design{"Active", "True", nodeconfigv1.LifecycleState_LIFECYCLE_STATE_WAITING, "Waiting"}
	rolledBackNode = design{"RolledBack", "False", nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ROLLED_BACK, "Refused"}
	failingNode    = design{"DownloadFailed", "False", nodeconfigv1.LifecycleState_LIFECYCLE_STATE_FAILING, "Failed"}
	silentNode     = design{"", "", nodeconfigv1.LifecycleState_LIFECYCLE_STATE_UNSPECIFIED, "Unreported"}
)

// fleetDesign gives node i of 1,000 its design: per hundred, 2 refused,
// 3 failing, 10 soaking, 25 held back, 59 active, 1 not reported.
func fleetDesign(i int) design {
	switch r := i % 100; {
	case r < 2:
		return rolledBackNode
	case r < 5:
		return failingNode
	case r < 15:
		return soakingNode
	case r < 40:
		return heldNode
	case r < 99:
		return activeNode
	default:
		return silentNode
	}
}

const fleetLabel = "nodeconfig.io/fleet"

// fleet is n nodes made after fleetDesign, all selected by NodeConfig
// "fleet", and the reconciler's states of them.
type fleet struct {
	nodes  []*corev1.Node
	nc     *v1alpha1.NodeConfig
	states map[string]*nodeconfigv1.NodeState
	truth  map[string]string // node -> group
}

func nodeName(i int) string { return fmt.Sprintf("node-%04d", i) }

func newFleet(n int, designOf func(int) design) *fleet {
	f := &fleet{states: map[string]*nodeconfigv1.NodeState{}, truth: map[string]string{}}
	f.nc = &v1alpha1.NodeConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet"},
		Spec: v1alpha1.NodeConfigSpec{
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{fleetLabel: "true"}},
			Source:       &v1alpha1.Source{ConfigMap: &v1alpha1.ConfigMapSource{Namespace: "kube-system", Name: "kubelet", Key: "config.yaml"}},
		},
	}
	for i := range n {
		d := designOf(i)
		name := nodeName(i)
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{fleetLabel: "true"}}}
		if d.phase != "" {
			node.Annotations = map[string]string{v1alpha1.NodeAnnotationConfigStatus: `{"assigned": {"configMap": {"namespace": "kube-system", "name": "kubelet", "uid": "u", "resourceVersion": "7", "kubeletConfigKey": "config.yaml"}}}`}
			node.Status.Conditions = []corev1.NodeCondition{{Type: v1alpha1.NodeConditionConfigReady, Status: corev1.ConditionStatus(d.ready), Reason: d.phase, Message: "as designed"}}
		}
		if d.state != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_UNSPECIFIED {
			f.states[name] = &nodeconfigv1.NodeState{NodeName: name, NodeConfig: "fleet", State: d.state}
		}
		f.nodes = append(f.nodes, node)
		f.truth[name] = d.group
	}
	return f
}

// counts are the fleet's groups by the test's truth.
func (f *fleet) counts() map[string]int {
	out := map[string]int{}
	for _, g := range f.truth {
		out[g]++
	}
	return out
}

// clients are fake API clients holding the fleet.
func (f *fleet) clients() *kube.Clients {
	objs := make([]runtime.Object, len(f.nodes))
	for i, n := range f.nodes {
		objs[i] = n
	}
	return &kube.Clients{
		Config:      &rest.Config{Host: "https://127.0.0.1:1"},
		Kube:        kubefake.NewSimpleClientset(objs...),
		NodeConfigs: ncfake.NewSimpleClientset(f.nc),
	}
}

// fakeReconciler answers ListNodes with states.
type fakeReconciler struct {
	nodeconfigv1.UnimplementedReconcilerServiceServer
	mu     sync.Mutex
	states map[string]*nodeconfigv1.NodeState
}

func (r *fakeReconciler) ListNodes(context.Context, *nodeconfigv1.ListNodesRequest) (*nodeconfigv1.ListNodesResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := &nodeconfigv1.ListNodesResponse{}
	for _, st := range r.states {
		out.Nodes = append(out.Nodes, st)
	}
	return out, nil
}

// serveReconciler serves r on 127.0.0.1 until the test ends.
func serveReconciler(tb testing.TB, r nodeconfigv1.ReconcilerServiceServer) string {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := grpc.NewServer()
	nodeconfigv1.RegisterReconcilerServiceServer(s, r)
	go func() { _ = s.Serve(lis) }()
	tb.Cleanup(s.Stop)
	return lis.Addr().String()
}

// runFake runs the plugin against clients.
func runFake(c *kube.Clients, args ...string) (string, string, int) {
	var stdout, stderr bytes.Buffer
	code := runWith(context.Background(), args, &stdout, &stderr, func() (*kube.Clients, error) { return c, nil })
	return stdout.String(), stderr.String(), code
}

// lines are the output's lines that start with prefix.
func lines(out, prefix string) []string {
	var got []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			got = append(got, l)
		}
	}
	return got
}
