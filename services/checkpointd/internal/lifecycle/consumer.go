package lifecycle

import (
	"context"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/api/equality"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
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
// that the consumer must be restarted onto the new active config.
func (n *Node) consumerStale(r *nodeconfigv1.Records, now *timestamppb.Timestamp) {
	if n.consumer == nil {
		return
	}
	var src *nodeconfigv1.ConfigSource
	if r.Active != nil {
		src = r.Active.GetSource()
	}
	r.Consumer = &nodeconfigv1.ConsumerRecord{Source: src, Phase: nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_RESTARTING, Since: now}
}

// consumerUnchanged records, inside a records update that changes the
// file, that the consumer runs the new active config already: its
// effective config is the same, so it is not restarted, and the soak
// begins now.
func (n *Node) consumerUnchanged(r *nodeconfigv1.Records, now *timestamppb.Timestamp) {
	r.Consumer = &nodeconfigv1.ConsumerRecord{Source: r.GetActive().GetSource(), Phase: nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY, Since: now, SeenHealthy: now,
		Message: records.NoRestartNeeded + "the kubelet's effective config is the same on the new file"}
}

// sameForTheKubelet reports whether the kubelet, healthy on the file as it
// is, would start with the same effective config on content (a reformatted
// file, or one that says again what the node's own files say): then the
// file is written and the kubelet is not restarted. Where that cannot be
// told, it is restarted.
func (n *Node) sameForTheKubelet(recs *nodeconfigv1.Records, content []byte) bool {
	c := recs.GetConsumer()
	if n.consumer == nil || n.kubelet == nil || c.GetPhase() != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY ||
		!records.SameSource(c.GetSource(), recs.GetActive().GetSource()) {
		return false
	}
	onDisk, err := n.target.Read()
	if err != nil {
		return false
	}
	now, err := n.kubelet.Effective(context.Background(), onDisk)
	if err != nil {
		return false
	}
	then, err := n.kubelet.Effective(context.Background(), content)
	return err == nil && equality.Semantic.DeepEqual(now.Config, then.Config)
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
