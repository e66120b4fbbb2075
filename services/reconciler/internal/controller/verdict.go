package controller

import (
	"context"
	"sync"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// A version that fails its NodeConfig's validator is refused here, before
// any node is assigned it, instead of costing a rollback on the first
// nodes to try it. Each node still validates on activation, where it can
// also see what only it has (its own files).

// maxVerdicts bounds the versions whose verdict is kept; there are rarely
// more than a few per NodeConfig alive.
const maxVerdicts = 256

type verdicts struct {
	mu   sync.Mutex
	byV  map[version]string // "" when the payload passed
	keys []version          // oldest first
}

// refusal validates a version's payload once and says why it is refused
// ("" if it passes).
func (c *Controller) refusal(v version, validator nodeconfigv1.Validator, payload string) string {
	if c.o.NodeValidationOnly {
		return ""
	}
	vs := &c.verdicts
	vs.mu.Lock()
	defer vs.mu.Unlock()
	if msg, ok := vs.byV[v]; ok {
		return msg
	}
	msg := ""
	if err := c.o.Checker.Payload(context.Background(), validator, []byte(payload)); err != nil {
		msg = err.Error()
	}
	if vs.byV == nil {
		vs.byV = map[version]string{}
	}
	if len(vs.keys) >= maxVerdicts {
		delete(vs.byV, vs.keys[0])
		vs.keys = vs.keys[1:]
	}
	vs.byV[v] = msg
	vs.keys = append(vs.keys, v)
	return msg
}

// knownRefusal is the verdict already reached on v, without validating.
func (c *Controller) knownRefusal(v version) string {
	c.verdicts.mu.Lock()
	defer c.verdicts.mu.Unlock()
	return c.verdicts.byV[v]
}
