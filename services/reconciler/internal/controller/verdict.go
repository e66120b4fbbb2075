package controller

import (
	"context"
	"sync"
	"time"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/configcheck"
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

// maxVerdicts bounds the versions whose verdict is kept; there are rarely
// more than a few per NodeConfig alive.
const maxVerdicts = 256

type verdicts struct {
	mu   sync.Mutex
	byV  map[version]string // "" when the payload passed
	keys []version          // oldest first
	// runs are the validations under way, and the last failed one of each
	// version without a verdict.
	runs map[version]*run
}

// run is one validation of a version. The nodes of a version share it:
// those that come while it runs wait for its end, and a failure is
// answered to them for half of BaseDelay without running again, which is
// less than the first retry of a node (BaseDelay, jittered down to 0.8 x).
type run struct {
	done chan struct{} // closed at its end
	// err is why the validator could not run (set before done closes).
	err   error
	ended time.Time
}

// refusal validates a version's payload once and says why it is refused
// ("" if it passes). An error says the validator could not run: the
// version has no verdict yet.
func (c *Controller) refusal(ctx context.Context, v version, validator nodeconfigv1.Validator, payload string) (string, error) {
	if c.o.NodeValidationOnly {
		return "", nil
	}
	vs := &c.verdicts
	vs.mu.Lock()
	for {
		if msg, ok := vs.byV[v]; ok {
			vs.mu.Unlock()
			return msg, nil
		}
		r := vs.runs[v]
		if r == nil {
			break
		}
		select {
		case <-r.done:
			if c.o.Now().Sub(r.ended) < c.o.BaseDelay/2 {
				vs.mu.Unlock()
				return "", r.err
			}
			// A failure old enough to try again: this node runs it.
			delete(vs.runs, v)
			continue
		default:
		}
		vs.mu.Unlock()
		select {
		case <-r.done:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		vs.mu.Lock()
	}
	r := &run{done: make(chan struct{})}
	if vs.runs == nil {
		vs.runs = map[version]*run{}
	}
	if len(vs.runs) >= maxVerdicts {
		vs.forgetOldFailuresLocked(c.o.Now().Add(-c.o.MaxDelay))
	}
	vs.runs[v] = r
	vs.mu.Unlock()

	msg := ""
	err := c.o.Checker.Payload(ctx, validator, []byte(payload))
	if err != nil && !configcheck.Unavailable(err) {
		msg, err = err.Error(), nil
	}

	vs.mu.Lock()
	if err != nil {
		r.err, r.ended = err, c.o.Now()
	} else {
		delete(vs.runs, v)
		vs.keepLocked(v, msg)
	}
	close(r.done)
	vs.mu.Unlock()
	if err != nil {
		c.o.Log.Warn("central validation could not run; the version is assigned to no node until it does (retried with backoff)",
			"configMapUID", v.uid, "resourceVersion", v.resourceVersion, "key", v.key, "validator", v.validator, "err", err)
		return "", err
	}
	return msg, nil
}

// keepLocked keeps the verdict on v, forgetting the oldest beyond
// maxVerdicts.
func (vs *verdicts) keepLocked(v version, msg string) {
	if vs.byV == nil {
		vs.byV = map[version]string{}
	}
	if len(vs.keys) >= maxVerdicts {
		delete(vs.byV, vs.keys[0])
		vs.keys = vs.keys[1:]
	}
	vs.byV[v] = msg
	vs.keys = append(vs.keys, v)
}

// forgetOldFailuresLocked drops the failed runs that ended before cutoff: a
// version still wanted is asked again within MaxDelay (the longest retry),
// so these are of versions no node asks about any more.
func (vs *verdicts) forgetOldFailuresLocked(cutoff time.Time) {
	for v, r := range vs.runs {
		select {
		case <-r.done:
			if r.ended.Before(cutoff) {
				delete(vs.runs, v)
			}
		default:
		}
	}
}

// knownRefusal is the verdict already reached on v, without validating.
func (c *Controller) knownRefusal(v version) string {
	c.verdicts.mu.Lock()
	defer c.verdicts.mu.Unlock()
	return c.verdicts.byV[v]
}

// unjudged is why the validator could not run on v the last time it
// tried, nil once it ran (or before it first ran).
func (c *Controller) unjudged(v version) error {
	c.verdicts.mu.Lock()
	defer c.verdicts.mu.Unlock()
	r := c.verdicts.runs[v]
	if r == nil {
		return nil
	}
	select {
	case <-r.done:
		return r.err
	default:
		return nil
	}
}
