package lifecycle

import (
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// ReasonConsumerUnhealthy is the late error of a config the consumer does
// not run healthy.
const ReasonConsumerUnhealthy = nodeconfigv1.ReasonConsumerUnhealthy

// ConsumerNode is the lifecycle as the consumer gate sees it.
type ConsumerNode struct{ *Node }

// SetConsumer records the consumer's phase on src while src is active.
func (c ConsumerNode) SetConsumer(src *nodeconfigv1.ConfigSource, phase nodeconfigv1.ConsumerPhase, message string) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
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
		r.Consumer = &nodeconfigv1.ConsumerRecord{Source: src, Phase: phase, Since: now, Message: message}
		return true, nil
	})
	return ok, err
}

// RollBack makes last-known-good active because the consumer does not run
// src healthy: a late error, as a config that fails to load.
func (c ConsumerNode) RollBack(src *nodeconfigv1.ConfigSource, message string) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	recs, err := c.store.Records()
	if err != nil {
		return false, err
	}
	if src == nil || !proto.Equal(recs.GetActive().GetSource(), src) || proto.Equal(recs.GetLastKnownGood().GetSource(), src) {
		return false, nil
	}
	if _, err := c.rollBackLocked(ReasonConsumerUnhealthy, message, src); err != nil {
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

func (n *Node) wakeConsumer() {
	if n.consumer != nil {
		n.consumer.Wake()
	}
}

func consumerPhase(r *nodeconfigv1.Records) string {
	phase := strings.TrimPrefix(r.GetConsumer().GetPhase().String(), "CONSUMER_PHASE_")
	return strings.ToLower(phase)
}
