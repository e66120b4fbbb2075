package controller

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sync/singleflight"
	"k8s.io/utils/lru"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/configcheck"
	"nodeconfig.io/services/reconciler/internal/rollout"
)

// A version that fails its NodeConfig's validator is refused here, before
// any node is assigned it, instead of costing a rollback on the first
// nodes to try it. Each node still validates on activation, where it can
// also see what only it has (its own files).
//
// The kubelet validator runs in a child process (Options.Checker): when it
// cannot run, the version has no verdict. It is then neither refused nor
// assigned: the nodes are held and retry with backoff, and the failure is
// not kept as a verdict.

// maxVerdicts bounds the versions whose verdict (or last failure to reach
// one) is kept; there are rarely more than a few per NodeConfig alive.
const maxVerdicts = 256

type verdicts struct {
	judged *lru.Cache // version -> string, "" when the payload passed
	failed *lru.Cache // version -> failure, the last run that could not judge
	// runs lets the nodes of a version share one validation under way.
	runs singleflight.Group
}

// failure is a validation that could not run. It is answered to the
// version's nodes for half of BaseDelay without running again, which is
// less than the first retry of a node (BaseDelay, jittered down to 0.8 x).
type failure struct {
	err   error
	ended time.Time
}

// refusal validates a version's payload once and says why it is refused
// ("" if it passes). An error says the validator could not run: the
// version has no verdict yet.
func (c *Controller) refusal(ctx context.Context, v rollout.Version, validator nodeconfigv1.Validator, payload string) (string, error) {
	// The field policy first, and whatever --node-validation-only says:
	// it costs no child process, and a refused field is refused on every
	// node anyway.
	if err := c.o.Rules.Admit(validator, []byte(payload)); err != nil {
		c.verdicts.judged.Add(v, err.Error())
		return err.Error(), nil
	}
	if c.o.NodeValidationOnly {
		return "", nil
	}
	vs := &c.verdicts
	if msg, ok := vs.judged.Get(v); ok {
		return msg.(string), nil
	}
	if f, ok := vs.failed.Get(v); ok && c.o.Now().Sub(f.(failure).ended) < c.o.BaseDelay/2 {
		return "", f.(failure).err
	}
	run := vs.runs.DoChan(fmt.Sprintf("%+v", v), func() (any, error) {
		// A run that ended since the looks above already judged it.
		if msg, ok := vs.judged.Get(v); ok {
			return msg, nil
		}
		err := c.o.Checker.Payload(ctx, validator, []byte(payload))
		if err != nil && configcheck.Unavailable(err) {
			vs.failed.Add(v, failure{err: err, ended: c.o.Now()})
			c.o.Log.Warn("central validation could not run; the version is assigned to no node until it does (retried with backoff)",
				"configMapUID", v.UID, "resourceVersion", v.ResourceVersion, "key", v.Key, "validator", v.Validator, "err", err)
			return "", err
		}
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		vs.failed.Remove(v)
		vs.judged.Add(v, msg)
		return msg, nil
	})
	select {
	case r := <-run:
		if r.Err != nil {
			return "", r.Err
		}
		return r.Val.(string), nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// knownRefusal is the verdict already reached on v, without validating.
func (c *Controller) knownRefusal(v rollout.Version) string {
	msg, _ := c.verdicts.judged.Get(v)
	s, _ := msg.(string)
	return s
}

// unjudged is why the validator could not run on v the last time it
// tried, nil once it ran (or before it first ran).
func (c *Controller) unjudged(v rollout.Version) error {
	if f, ok := c.verdicts.failed.Get(v); ok {
		return f.(failure).err
	}
	return nil
}
