package controller

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// Preview is what a node would run with the config its NodeConfig wants
// for it, or with a candidate, as the node itself merges it, before the
// node is given it.
type Preview struct {
	NodeConfig string
	Source     *nodeconfigv1.ConfigSource // nil: the local default, or a candidate
	Payload    []byte
	Node       *nodeconfigv1.PreviewConfigResponse
}

// MaxCandidate is the largest candidate Preview takes: a ConfigMap's
// largest, so a candidate is one that could be rolled out.
const MaxCandidate = 1 << 20

// ErrCandidateTooLarge is Preview's answer for a candidate over MaxCandidate.
var ErrCandidateTooLarge = fmt.Errorf("the candidate is larger than a ConfigMap holds (%d bytes)", MaxCandidate)

// ErrNoSuchNode is Preview's answer for a node the cluster does not have.
var ErrNoSuchNode = fmt.Errorf("no such Node")

// Preview asks the node's agent what the desired config, or candidate when
// not nil, would run as there: the node merges it with its own files and
// judges it as on activation. It reads the caches and calls the agent
// only: nothing is assigned.
func (c *Controller) Preview(ctx context.Context, name string, candidate *nodeconfigv1.PreviewConfigRequest) (*Preview, error) {
	if len(candidate.GetPayload()) > MaxCandidate {
		return nil, ErrCandidateTooLarge
	}
	node, err := c.o.Nodes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w %q", ErrNoSuchNode, name)
	}
	if err != nil {
		return nil, err
	}
	ncs, err := c.nodeConfigs()
	if err != nil {
		return nil, err
	}
	p := &Preview{}
	var validator nodeconfigv1.Validator
	for _, nc := range ncs {
		if nc.DeletionTimestamp != nil || !c.selects(nc, node) {
			continue
		}
		if candidate != nil {
			// The candidate stands in the place of what the NodeConfig
			// wants: that is not read, and a conflict does not matter.
			p.NodeConfig = nc.Name
			break
		}
		if p.NodeConfig != "" {
			return nil, fmt.Errorf("node %q is selected by NodeConfigs %s and %s (a SelectorConflict): it takes neither", name, p.NodeConfig, nc.Name)
		}
		p.NodeConfig, validator = nc.Name, validators[nc.Spec.Validator]
		if nc.Spec.Source == nil || nc.Spec.Source.ConfigMap == nil {
			continue
		}
		src, data, err := c.resolve(nc)
		if err != nil {
			return nil, fmt.Errorf("NodeConfig %s: %w", nc.Name, err)
		}
		p.Source, p.Payload = src, []byte(data[src.GetKey()])
	}
	if candidate != nil {
		p.Payload, validator = candidate.GetPayload(), candidate.GetValidator()
	}
	agent, release, err := c.o.Agents.For(name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	defer release()
	rpcCtx, cancel := context.WithTimeout(ctx, c.o.RPCTimeout)
	defer cancel()
	if p.Node, err = agent.PreviewConfig(rpcCtx, &nodeconfigv1.PreviewConfigRequest{Payload: p.Payload, Validator: validator}); err != nil {
		return nil, fmt.Errorf("ask %s's agent: %w", name, err)
	}
	return p, nil
}
