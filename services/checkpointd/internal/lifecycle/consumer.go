package lifecycle

import (
	"context"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/api/equality"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/configcheck/disruption"
	"nodeconfig.io/services/configcheck/kubeletcheck"
)

// ConsumerNode is the lifecycle as the consumer gate sees it.
type ConsumerNode struct{ *Node }

// SetConsumer records the consumer's phase on src while src is active.
func (c ConsumerNode) SetConsumer(src *nodeconfigv1.ConfigSource, phase nodeconfigv1.ConsumerPhase, message string) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if phase == nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY && !c.guardHealthyLocked(src) {
		// The guard put last-known-good back: what runs healthy is not src.
		return false, nil
	}
	ok := false
	_, err := c.store.UpdateRecords(func(r *nodeconfigv1.Records, now *timestamppb.Timestamp) (bool, error) {
		if !proto.Equal(r.GetActive().GetSource(), src) {
			return false, nil
		}
		ok = true
		prev := r.GetConsumer()
		if proto.Equal(prev.GetSource(), src) && prev.GetPhase() == phase && prev.GetMessage() == message {
			return false, nil
		}
		next := &nodeconfigv1.ConsumerRecord{Source: src, Phase: phase, Since: now, Message: message}
		if proto.Equal(prev.GetSource(), src) {
			next.HealthyBefore = durationpb.New(healthyBefore(prev))
			next.ReadyBefore = prev.GetReadyBefore()
			// What the restart onto src took stays said, and so does
			// whether its state files went.
			next.Disruption = prev.GetDisruption()
		}
		if phase == nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY {
			next.SeenHealthy = now
		}
		r.Consumer = next
		return true, nil
	})
	return ok, err
}

// healthyBefore is the healthy time on its config a consumer record carries
// into the next one: what it carried in, and, if it was HEALTHY, its phase
// up to the last probe that found it so (the time after that is unknown and
// does not count).
func healthyBefore(c *nodeconfigv1.ConsumerRecord) time.Duration {
	d := c.GetHealthyBefore().AsDuration()
	if c.GetPhase() == nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY && c.GetSeenHealthy() != nil {
		d += max(0, c.GetSeenHealthy().AsTime().Sub(c.GetSince().AsTime()))
	}
	return d
}

// SeenHealthy records that a probe found the consumer healthy on src, which
// the soak keeps should the node go down before the next.
func (c ConsumerNode) SeenHealthy(src *nodeconfigv1.ConfigSource) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	// The guard hears of it too, so that restarts the probes did not see
	// count from here; and learns nothing false if it fell back meanwhile.
	if !c.guardHealthyLocked(src) {
		return nil
	}
	_, err := c.store.UpdateRecords(func(r *nodeconfigv1.Records, now *timestamppb.Timestamp) (bool, error) {
		cur := r.GetConsumer()
		if !proto.Equal(r.GetActive().GetSource(), src) || !proto.Equal(cur.GetSource(), src) || cur.GetPhase() != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY {
			return false, nil
		}
		cur.SeenHealthy = now
		return true, nil
	})
	return err
}

// SetReadyBefore records, once per trial, the pods that were ready before
// the consumer was restarted onto src; false when src is no longer what the
// consumer is restarting onto, or they were recorded already.
func (c ConsumerNode) SetReadyBefore(src *nodeconfigv1.ConfigSource, pods []string) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ok := false
	_, err := c.store.UpdateRecords(func(r *nodeconfigv1.Records, now *timestamppb.Timestamp) (bool, error) {
		cur := r.GetConsumer()
		if !proto.Equal(r.GetActive().GetSource(), src) || !proto.Equal(cur.GetSource(), src) || cur.GetReadyBefore() != nil {
			return false, nil
		}
		ok = true
		cur.ReadyBefore = &nodeconfigv1.PodSnapshot{Taken: now, Pods: pods}
		return true, nil
	})
	return ok, err
}

// RollBack makes last-known-good active because the consumer does not run
// src healthy, or a health gate failed on it: a late error of reason, as a
// config that fails to load. When src is last-known-good, the node falls
// back to its local default.
func (c ConsumerNode) RollBack(src *nodeconfigv1.ConfigSource, reason, message string) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	recs, err := c.store.Records()
	if err != nil {
		return false, err
	}
	// Last-known-good too: the local default is under it.
	if src == nil || !proto.Equal(recs.GetActive().GetSource(), src) {
		return false, nil
	}
	if _, err := c.rollBackLocked(reason, message, src); err != nil {
		return false, err
	}
	return true, nil
}

// consumerStale records, inside a records update that changes the file,
// that the consumer must be restarted onto the new active config, and
// what that takes beyond a restart (d; nil: a restart). A restart still
// to come carries over what it had to do: the kubelet still runs the file
// before it.
func (n *Node) consumerStale(r *nodeconfigv1.Records, now *timestamppb.Timestamp, d *nodeconfigv1.Disruption) {
	if n.consumer == nil {
		return
	}
	var src *nodeconfigv1.ConfigSource
	if r.Active != nil {
		src = r.Active.GetSource()
	}
	if prev := r.GetConsumer(); prev.GetPhase() == nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_RESTARTING && prev.GetDisruption() != nil {
		d = unionDisruption(prev.GetDisruption(), d)
	}
	r.Consumer = &nodeconfigv1.ConsumerRecord{Source: src, Phase: nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_RESTARTING, Since: now, Disruption: d}
}

// unionDisruption is what two changes in a row need when the kubelet was
// not restarted between them: every field either changes (a superset of
// what the two together change) and every state file either removes but
// has not removed yet.
func unionDisruption(prev, next *nodeconfigv1.Disruption) *nodeconfigv1.Disruption {
	out := &nodeconfigv1.Disruption{}
	for _, d := range []*nodeconfigv1.Disruption{prev, next} {
		out.Fields = append(out.Fields, d.GetFields()...)
		if d.GetRemoved() == nil {
			out.Remove = append(out.Remove, d.GetRemove()...)
		}
	}
	out.Fields = slices.Compact(slices.Sorted(slices.Values(out.Fields)))
	out.Remove = slices.Compact(slices.Sorted(slices.Values(out.Remove)))
	if len(out.Fields) == 0 && len(out.Remove) == 0 {
		return nil
	}
	return out
}

// consumerUnchanged records, inside a records update that changes the
// file, that the consumer runs the new active config already: its
// effective config is the same, so it is not restarted, and the soak
// begins now.
func (n *Node) consumerUnchanged(r *nodeconfigv1.Records, now *timestamppb.Timestamp) {
	r.Consumer = &nodeconfigv1.ConsumerRecord{Source: r.GetActive().GetSource(), Phase: nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY, Since: now, SeenHealthy: now,
		Message: records.NoRestartNeeded + "the kubelet's effective config is the same on the new file"}
}

// kubeletChange is the kubelet's effective config with the file as it is
// on disk (now) and with a new content in its place (then).
type kubeletChange struct{ now, then *kubeletcheck.Effective }

// kubeletChangeTo is the change content (nil: no file) makes to the
// kubelet's effective config; nil where it cannot be told (no kubelet
// files known, or either file does not merge): then the kubelet is
// restarted, and nothing more is known of what that takes.
func (n *Node) kubeletChangeTo(content []byte) *kubeletChange {
	if n.kubelet == nil {
		return nil
	}
	onDisk, err := n.target.Read()
	if err != nil {
		return nil
	}
	now, err := n.kubelet.Effective(context.Background(), onDisk)
	if err != nil {
		return nil
	}
	then, err := n.kubelet.Effective(context.Background(), content)
	if err != nil {
		return nil
	}
	return &kubeletChange{now: now, then: then}
}

// same says whether the kubelet would start with the same effective
// config (a reformatted file, or one that says again what the node's own
// files say).
func (c *kubeletChange) same() bool {
	return c != nil && equality.Semantic.DeepEqual(c.now.Config, c.then.Config)
}

// plan is what the change needs beyond a restart (docs/disruption.md);
// ok is false where it cannot be told.
func (c *kubeletChange) plan() (p disruption.Plan, ok bool) {
	if c == nil {
		return p, false
	}
	p, err := disruption.For(c.now, c.then)
	return p, err == nil
}

// record is the plan as the consumer record keeps it (nil: a restart).
func (c *kubeletChange) record() *nodeconfigv1.Disruption {
	p, ok := c.plan()
	if !ok || !p.Restart() {
		return nil
	}
	return &nodeconfigv1.Disruption{Fields: p.Fields, Remove: p.Remove}
}

// sameForTheKubelet reports whether the kubelet, healthy on the file as it
// is, would start with the same effective config after change: then the
// file is written and the kubelet is not restarted. Where that cannot be
// told, it is restarted.
func (n *Node) sameForTheKubelet(recs *nodeconfigv1.Records, change *kubeletChange) bool {
	c := recs.GetConsumer()
	if n.consumer == nil || c.GetPhase() != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY ||
		!records.SameSource(c.GetSource(), recs.GetActive().GetSource()) {
		return false
	}
	return change.same()
}

// StateFilesRemoved records that the state files the restart onto src
// removes are removed, so that a restart after it leaves the new
// kubelet's alone; false when src is no longer what the consumer is
// restarting onto.
func (c ConsumerNode) StateFilesRemoved(src *nodeconfigv1.ConfigSource) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ok := false
	_, err := c.store.UpdateRecords(func(r *nodeconfigv1.Records, now *timestamppb.Timestamp) (bool, error) {
		cur := r.GetConsumer()
		if !records.SameSource(r.GetActive().GetSource(), src) || !records.SameSource(cur.GetSource(), src) ||
			cur.GetPhase() != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_RESTARTING || cur.GetDisruption() == nil {
			return false, nil
		}
		ok = true
		if cur.GetDisruption().GetRemoved() != nil {
			return false, nil
		}
		cur.Disruption.Removed = now
		return true, nil
	})
	return ok, err
}

func (n *Node) wakeConsumer() {
	if n.consumer != nil {
		n.consumer.Wake()
	}
}

func consumerPhase(r *nodeconfigv1.Records) string {
	phase := strings.TrimPrefix(r.GetConsumer().GetPhase().String(), "CONSUMER_PHASE_")
	return strings.ToLower(phase)
}
