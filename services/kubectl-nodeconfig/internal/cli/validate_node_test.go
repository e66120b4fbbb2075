package cli

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	ncfake "nodeconfig.io/services/api/client/clientset/fake"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/kube"
)

// The node's files, as the fake node merges them.
const (
	nodeBase   = "/etc/kubernetes/kubelet.yaml"
	nodeDropIn = "/etc/kubernetes/kubelet.conf.d/50-nodeconfig.conf"
	nodeNow    = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 50\n"
)

// previewingReconciler answers PreviewNode as the reconciler does, with a
// node that merges by appending the candidate's lines to its own and
// refuses what clashes with its base file ("cgroupDriver: cgroupfs"). Its
// node-down's agent cannot be reached. Old, it previews the desired config
// whatever the request says, as a reconciler before validate --node.
type previewingReconciler struct {
	nodeconfigv1.UnimplementedReconcilerServiceServer
	old bool
	mu  sync.Mutex
	// asked are the requests it got.
	asked []*nodeconfigv1.PreviewNodeRequest
}

func (r *previewingReconciler) PreviewNode(_ context.Context, req *nodeconfigv1.PreviewNodeRequest) (*nodeconfigv1.PreviewNodeResponse, error) {
	r.mu.Lock()
	r.asked = append(r.asked, proto.Clone(req).(*nodeconfigv1.PreviewNodeRequest))
	r.mu.Unlock()
	switch req.GetNodeName() {
	case "node-down":
		return nil, status.Error(codes.FailedPrecondition, "node-down: ask node-down's agent: connection refused")
	case "node-a", "node-b":
	default:
		return nil, status.Errorf(codes.NotFound, "no such Node %q", req.GetNodeName())
	}
	payload := req.GetCandidate().GetPayload()
	if r.old {
		payload = []byte("maxPods: 7\n")
	}
	p := &nodeconfigv1.PreviewConfigResponse{Files: []string{nodeBase, nodeDropIn}, Merged: true, Current: nodeNow}
	if strings.Contains(string(payload), "cgroupDriver: cgroupfs") {
		p.Refused = "invalid KubeletConfiguration merged with the node's files: cgroupDriver: Invalid value: \"cgroupfs\": the node's base file says systemd"
	} else {
		p.Candidate = nodeNow + strings.TrimPrefix(string(payload), "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n")
	}
	return &nodeconfigv1.PreviewNodeResponse{NodeConfig: "demo", Payload: payload, Preview: p, Candidate: req.GetCandidate() != nil && !r.old}, nil
}

func (r *previewingReconciler) requests() []*nodeconfigv1.PreviewNodeRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.asked
}

// nodeClients hold node-a, which demo selects, node-b, which it does not,
// and node-down.
func nodeClients() *kube.Clients {
	node := func(name string, labels map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	return &kube.Clients{
		Config: &rest.Config{Host: "https://127.0.0.1:1"},
		Kube: kubefake.NewSimpleClientset(
			node("node-a", map[string]string{"nodeconfig.io/demo": "true"}),
			node("node-b", nil),
			node("node-down", map[string]string{"nodeconfig.io/demo": "true"}),
		),
		NodeConfigs: ncfake.NewSimpleClientset(),
	}
}

// validate --node judges each payload the central check passes on the
// node too, merged with its files by the node (through the reconciler's
// PreviewNode with the payload as its candidate): the node's words when
// it refuses, the diff of its effective config when not; a payload the
// central check refuses is never sent; bad input is an error and exit 1.
func TestValidateOnANode(t *testing.T) {
	check := fakeKubeletCheck(t)
	c := nodeClients()
	withPayload := func(p string) string { return demoNodeConfig + "---\n" + demoConfigMap(p) }
	clashing := goodPayload + "cgroupDriver: cgroupfs\n"
	good, clash := withPayload(goodPayload), withPayload(clashing)
	bad := withPayload(strings.Replace(goodPayload, "maxPods: 110", "hairpinMode: bogus", 1))
	for _, tc := range []struct {
		name, file, node string
		old              bool
		code             int
		outputs          []string
		// asked is the payload the node is asked about, "" for none.
		asked string
	}{
		{"a payload the node takes", good, "node-a", false, 0, []string{
			"validator kubelet: passed\n  on node node-a: passed: its effective config would change:\n",
			"    +maxPods: 110\n", "  the node merges, in order: " + nodeBase + ", " + nodeDropIn + "\n", "1 passed, 0 refused, 0 unjudged\n",
		}, goodPayload},
		{"a payload only the node refuses", clash, "node-a", false, 1, []string{
			"validator kubelet: passed\n  on node node-a: refused: invalid KubeletConfiguration merged with the node's files: cgroupDriver", "0 passed, 1 refused, 0 unjudged\n",
		}, clashing},
		{"a node the NodeConfig does not select", good, "node-b", false, 0, []string{"  note: this NodeConfig does not select node node-b\n"}, goodPayload},
		{"a payload the central check refuses", bad, "node-a", false, 1, []string{"validator kubelet: refused: invalid KubeletConfiguration: hairpinMode"}, ""},
		{"a node whose agent cannot answer", good, "node-down", false, 2, []string{
			"  on node node-down: unjudged: node-down: ask node-down's agent: connection refused\n", "0 passed, 0 refused, 1 unjudged\n",
		}, goodPayload},
		{"no such node", good, "nosuch", false, 1, []string{`error: --node nosuch: nodes "nosuch" not found`}, ""},
		{"a reconciler before validate --node", good, "node-a", true, 1, []string{"it predates validate --node, upgrade it"}, goodPayload},
		{"a file that does not read", "kind: [", "node-a", false, 1, []string{"error: ", "does not read as YAML or JSON"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &previewingReconciler{old: tc.old}
			addr := serveReconciler(t, r)
			out, stderr, code := runFake(c, "validate", "-f", writeFile(t, tc.file), "--node", tc.node, "--kubelet-check-binary", check, "--reconciler", addr)
			t.Logf("$ kubectl nodeconfig validate -f FILE --node %s\n%s%s", tc.node, out, stderr)
			if code != tc.code {
				t.Errorf("exit %d, want %d\n%s%s", code, tc.code, out, stderr)
			}
			for _, want := range tc.outputs {
				if !strings.Contains(out+stderr, want) {
					t.Errorf("does not say %q:\n%s%s", want, out, stderr)
				}
			}
			asked := r.requests()
			switch {
			case tc.asked == "" && len(asked) != 0:
				t.Errorf("the reconciler was asked %v, want nothing", asked)
			case tc.asked == "":
			case len(asked) != 1:
				t.Errorf("the reconciler was asked %v, want once", asked)
			default:
				want := &nodeconfigv1.PreviewConfigRequest{Payload: []byte(tc.asked), Validator: nodeconfigv1.Validator_VALIDATOR_KUBELET}
				if asked[0].GetNodeName() != tc.node || !proto.Equal(asked[0].GetCandidate(), want) {
					t.Errorf("asked %v, want node %s and the file's payload %q", asked[0], tc.node, tc.asked)
				}
			}
		})
	}

	t.Run("no reconciler", func(t *testing.T) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := lis.Addr().String()
		_ = lis.Close()
		_, stderr, code := runFake(c, "validate", "-f", writeFile(t, good), "--node", "node-a", "--kubelet-check-binary", check, "--reconciler", closed)
		if code != 1 || !strings.Contains(stderr, "validate --node needs the reconciler, which is not reachable") {
			t.Errorf("exit %d: %s", code, stderr)
		}
	})
}

func TestValidateOnANodeJSON(t *testing.T) {
	check := fakeKubeletCheck(t)
	addr := serveReconciler(t, &previewingReconciler{})
	out, stderr, code := runFake(nodeClients(), "validate", "-f", writeFile(t, demoNodeConfig+"---\n"+demoConfigMap(goodPayload)),
		"--node", "node-b", "--kubelet-check-binary", check, "--reconciler", addr, "-o", "json")
	var r struct {
		Node   string `json:"node"`
		Checks []struct {
			Verdict string `json:"verdict"`
			Node    struct {
				Node, Verdict, Current, Candidate, Diff string
				Selected                                *bool
				Files                                   []string
				Merged                                  bool
			} `json:"node"`
		} `json:"checks"`
		Passed int `json:"passed"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v:\n%s%s", err, out, stderr)
	}
	// What the node is asked about stays inside the plugin.
	if strings.Contains(out, `"judged"`) || strings.Contains(out, `"selector"`) {
		t.Errorf("-o json prints the checks' internals:\n%s", out)
	}
	if code != 0 || r.Node != "node-b" || r.Passed != 1 || len(r.Checks) != 1 {
		t.Fatalf("exit %d: %+v", code, r)
	}
	n := r.Checks[0].Node
	if n.Node != "node-b" || n.Verdict != "Passed" || n.Selected == nil || *n.Selected || !n.Merged || len(n.Files) != 2 ||
		n.Current != nodeNow || n.Candidate != nodeNow+"maxPods: 110\n" || !strings.Contains(n.Diff, "+maxPods: 110\n") {
		t.Errorf("node: %+v", n)
	}
}
