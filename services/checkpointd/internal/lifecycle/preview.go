package lifecycle

import (
	"context"
	"fmt"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// Preview is what the consumer would run with a payload in the place of
// the node's file, and whether activation would accept it.
type Preview struct {
	// Files are the files the consumer reads, in its order.
	Files []string
	// Current and Candidate are its configuration now and with the
	// payload: merged with the node's other files when Merged.
	Current, Candidate string
	Merged             bool
	// Refused says why activation would refuse the payload (empty: it
	// would not).
	Refused string
}

// Preview shows what the consumer would run with payload, judged by v. It
// writes nothing and takes no mu, so it never waits on a rollout: it
// reads the files where the node last found them.
func (n *Node) Preview(ctx context.Context, payload []byte, v nodeconfigv1.Validator) (Preview, error) {
	target, kubelet := n.files()
	if target.Dir == "" {
		return Preview{}, refusedf("the node has not found where the kubelet reads its files yet: its NodeConfigReady condition says why")
	}
	onDisk, err := target.Read()
	if err != nil {
		return Preview{}, err
	}
	var p Preview
	if v != nodeconfigv1.Validator_VALIDATOR_KUBELET || kubelet == nil {
		p.Files, p.Current = []string{target.Path()}, string(onDisk)
		if err := judgeOn(kubelet, v, payload); err != nil {
			p.Refused = err.Error()
		} else {
			p.Candidate = string(payload)
		}
		return p, nil
	}
	p.Merged = true
	if now, err := kubelet.Effective(ctx, onDisk); err != nil {
		p.Current = fmt.Sprintf("# the kubelet would refuse its files as they are: %v\n", err)
	} else if p.Current, err = effectiveYAML(now.YAML()); err != nil {
		return Preview{}, err
	}
	var candidate []byte // none: the local default, the file removed
	if len(payload) > 0 {
		candidate = payload
	}
	then, err := kubelet.Effective(ctx, candidate)
	if err != nil {
		p.Refused = err.Error()
		return p, nil
	}
	p.Files = then.Files
	if p.Candidate, err = effectiveYAML(then.YAML()); err != nil {
		return Preview{}, err
	}
	return p, nil
}

func effectiveYAML(b []byte, err error) (string, error) {
	if err != nil {
		return "", fmt.Errorf("render the effective configuration: %w", err)
	}
	return string(b), nil
}
