package controller

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// Preview is what a node would run with the config its NodeConfig wants
// for it, as the node itself merges it, before the node is given it.
type Preview struct {
	NodeConfig string
	Source     *nodeconfigv1.ConfigSource // nil: the local default
	Payload    []byte
	Node       *nodeconfigv1.PreviewConfigResponse
}

// ErrNoSuchNode is Preview's answer for a node the cluster does not have.
var ErrNoSuchNode = fmt.Errorf("no such Node")

// Preview asks the node's agent what the desired config would run as there.
// It reads the caches and calls the agent only: nothing is assigned.
func (c *Controller) Preview(ctx context.Context, name string) (*Preview, error) {
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
