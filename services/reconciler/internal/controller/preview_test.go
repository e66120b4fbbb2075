package controller

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
)

// PreviewConfig answers what it was asked, and keeps the request.
func (a *fakeAgent) PreviewConfig(_ context.Context, r *nodeconfigv1.PreviewConfigRequest, _ ...grpc.CallOption) (*nodeconfigv1.PreviewConfigResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.call("PreviewConfig")
	a.previews = append(a.previews, proto.Clone(r).(*nodeconfigv1.PreviewConfigRequest))
	return &nodeconfigv1.PreviewConfigResponse{Candidate: string(r.GetPayload()), Merged: true}, nil
}

// Preview asks the node's agent about the desired config, or about a
// candidate in its place (validate --node): the candidate's payload and
// validator reach the agent, the NodeConfig's do not, and nothing is
// written.
func TestPreviewOfTheDesiredConfigOrACandidate(t *testing.T) {
	f := newFixture(t)
	a := f.addNode("n1", map[string]string{"pool": "a"})
	f.addConfigMap("ns", "cfg", "1", map[string]string{"k": "a: 1\n"})
	f.setNodeConfig(poolA("pool-a", v1alpha1.Rollout{}))
	ctx := context.Background()

	desired, err := f.c.Preview(ctx, "n1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if desired.NodeConfig != "pool-a" || string(desired.Payload) != "a: 1\n" || desired.Source.GetName() != "cfg" {
		t.Errorf("desired: %+v", desired)
	}

	candidate := &nodeconfigv1.PreviewConfigRequest{Payload: []byte(`{"b": 2}`), Validator: nodeconfigv1.Validator_VALIDATOR_JSON}
	p, err := f.c.Preview(ctx, "n1", candidate)
	if err != nil {
		t.Fatal(err)
	}
	if p.NodeConfig != "pool-a" || p.Source != nil || string(p.Payload) != `{"b": 2}` || p.Node.GetCandidate() != `{"b": 2}` {
		t.Errorf("candidate: %+v", p)
	}
	if len(a.previews) != 2 || !proto.Equal(a.previews[1], candidate) {
		t.Errorf("the agent was asked %v, want the candidate second", a.previews)
	}
	if w := a.writes(); len(w) != 2 || w[0] != "PreviewConfig" || w[1] != "PreviewConfig" {
		t.Errorf("the agent's calls: %v, want the two previews only", w)
	}

	// A candidate stands in the place of what the NodeConfigs want, so
	// two selecting the node is no reason not to preview it.
	other := poolA("pool-b", v1alpha1.Rollout{})
	f.setNodeConfig(other)
	if _, err := f.c.Preview(ctx, "n1", nil); err == nil || !strings.Contains(err.Error(), "SelectorConflict") {
		t.Errorf("desired config in a conflict: %v, want the SelectorConflict", err)
	}
	if _, err := f.c.Preview(ctx, "n1", candidate); err != nil {
		t.Errorf("candidate in a conflict: %v", err)
	}

	big := &nodeconfigv1.PreviewConfigRequest{Payload: make([]byte, MaxCandidate+1)}
	if _, err := f.c.Preview(ctx, "n1", big); !errors.Is(err, ErrCandidateTooLarge) {
		t.Errorf("a candidate over %d bytes: %v", MaxCandidate, err)
	}
	if _, err := f.c.Preview(ctx, "n9", candidate); !errors.Is(err, ErrNoSuchNode) {
		t.Errorf("no such node: %v", err)
	}
}
