package lifecycle

import (
	"context"
	"time"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/checkpointd/internal/store"
)

// PutCheckpoint stores the data of one ConfigMap version; created is false
// when the same data was stored already.
func (n *Node) PutCheckpoint(src *nodeconfigv1.ConfigSource, data map[string]string) (p store.Payload, created bool, err error) {
	start := time.Now()
	p, created, err = n.store.PutPayload(store.Payload{
		Namespace: src.GetNamespace(), Name: src.GetName(),
		UID: src.GetUid(), ResourceVersion: src.GetResourceVersion(),
		Data: data,
	})
	if err != nil {
		return store.Payload{}, false, err
	}
	if created {
		n.metrics.commitSeconds.Observe(time.Since(start).Seconds())
		n.metrics.checkpointsStored.Inc()
		n.metrics.checkpointBytes.Add(float64(p.SizeBytes))
	}
	return p, created, nil
}

// Checkpoint returns a stored payload.
func (n *Node) Checkpoint(uid, resourceVersion string) (store.Payload, error) {
	return n.store.GetPayload(uid, resourceVersion)
}

// Checkpoints lists the stored payloads.
func (n *Node) Checkpoints() ([]store.Payload, error) { return n.store.ListPayloads() }

// DeleteCheckpoint removes a payload no record names.
func (n *Node) DeleteCheckpoint(uid, resourceVersion string) error {
	if err := n.store.DeletePayload(uid, resourceVersion); err != nil {
		return err
	}
	n.refreshStoreGauges()
	return nil
}

// RunGC sweeps unreferenced payloads every interval until ctx ends.
func (n *Node) RunGC(ctx context.Context, interval, minAge time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			removed, err := n.store.SweepUnreferenced(minAge)
			if err != nil {
				n.log.Error("checkpoint sweep failed", "err", err)
				continue
			}
			n.metrics.sweeps.Inc()
			if removed > 0 {
				n.log.Info("swept unreferenced checkpoints", "removed", removed)
				n.refreshStoreGauges()
			}
		}
	}
}

func (n *Node) refreshStoreGauges() {
	ps, err := n.store.ListPayloads()
	if err != nil {
		return
	}
	var bytes int64
	for _, p := range ps {
		bytes += p.SizeBytes
	}
	n.metrics.checkpointsStored.Set(float64(len(ps)))
	n.metrics.checkpointBytes.Set(float64(bytes))
}
