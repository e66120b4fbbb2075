package server

import (
	"context"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	"nodeconfig.io/services/reconciler/internal/agents"
)

// standbyScan is how often a standby looks for nodes whose agent has no
// token yet (a new node, a token the LRU dropped, a failed request).
const standbyScan = 10 * time.Second

// leaderLook is how often a standby looks whether another replica leads.
const leaderLook = time.Second

// leadership is what a standby asks of its election.
type leadership interface {
	GetLeader() string
	IsLeader() bool
}

// standBy keeps, while another replica leads, a token for every node's
// agent, renewed ahead as a leader renews its own: a new leader then calls
// every agent at once instead of minting a token per node on its first
// pass, thousands of TokenRequests while the fleet waits for it. It
// watches the Nodes' names (and the agent Pods, when the agents are found
// in the cluster) and, once it has seen another replica hold the Lease,
// mints one token at a time, until ctx ends. A replica that stands alone
// mints none before it leads.
func (r *Reconciler) standBy(ctx context.Context, election leadership) {
	tokens := r.pool.Tokens
	if tokens == nil {
		return
	}
	nodes := metadatainformer.NewFilteredMetadataInformer(r.o.Metadata, nodesResource, metav1.NamespaceAll, 0, cache.Indexers{}, nil)
	if err := nodes.Informer().SetTransform(nodeNameOnly); err != nil {
		r.o.Log.Error("standby Node informer", "err", err)
		return
	}
	_, _ = nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				tokens.Forget(key)
			}
		},
	})
	synced := []cache.InformerSynced{nodes.Informer().HasSynced}
	pool := r.pool
	var running sync.WaitGroup
	defer running.Wait()
	if podFactory := r.agentPodFactory(); podFactory != nil {
		pods := podFactory.Core().V1().Pods()
		pool.Pods, pool.PodSelector = pods.Lister(), labels.Everything()
		synced = append(synced, pods.Informer().HasSynced)
		podFactory.Start(ctx.Done())
		defer podFactory.Shutdown()
	}
	agentPool := agents.New(pool)
	defer agentPool.Close()
	running.Go(func() { nodes.Informer().RunWithContext(ctx) })
	running.Go(func() { tokens.Run(ctx, r.o.Log) })
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return
	}
	tick := time.NewTicker(leaderLook)
	defer tick.Stop()
	var last time.Time
	for {
		otherLeads := election.GetLeader() != "" && !election.IsLeader()
		if otherLeads && time.Since(last) >= standbyScan {
			last = time.Now()
			if n := agentPool.StandByTokens(ctx, nodes.Informer().GetStore().ListKeys()); n > 0 {
				r.o.Log.Info("standing by: agent tokens minted for a fail-over", "minted", n, "took", time.Since(last).Round(time.Millisecond))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// nodeNameOnly keeps of a Node's metadata its name, all a standby needs.
func nodeNameOnly(obj any) (any, error) {
	n, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	return &metav1.PartialObjectMetadata{TypeMeta: nodeTypeMeta, ObjectMeta: metav1.ObjectMeta{Name: n.Name, ResourceVersion: n.ResourceVersion}}, nil
}
