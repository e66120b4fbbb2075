package server

import (
	"context"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/metadata/metadatalister"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	nodeconfiginformers "nodeconfig.io/services/api/client/informers"
	nodeconfiglisters "nodeconfig.io/services/api/client/listers/api/v1alpha1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/configcheck"
	"nodeconfig.io/services/configcheck/kubeletexec"
	"nodeconfig.io/services/reconciler/internal/agents"
	"nodeconfig.io/services/reconciler/internal/cmwatch"
	"nodeconfig.io/services/reconciler/internal/controller"
	"nodeconfig.io/services/reconciler/internal/history"
	"nodeconfig.io/services/reconciler/internal/intern"
	"nodeconfig.io/services/servekit"
)

// nodesResource is what the Node informer lists and watches.
var nodesResource = corev1.SchemeGroupVersion.WithResource("nodes")

// lead builds the reconciler's whole view (informers, agent pool, event
// recorder, controller) and runs the controller until ctx ends.
func (r *Reconciler) lead(ctx context.Context) {
	r.leader.Set(1)
	defer r.leader.Set(0)
	// The leadership's work queues are shut down once the controller
	// returns; their series go with them, as its gauges do.
	defer servekit.ForgetWorkQueues(controller.NodeQueue, controller.NodeConfigQueue)
	// Nodes are watched as metadata only: the API server leaves out their
	// spec and status (kilobytes each, rewritten by every status patch),
	// so neither the decoding nor the cache pays for them. No index either:
	// the namespace index a factory adds would be one set of every Node's
	// name, as Nodes have no namespace.
	nodes := metadatainformer.NewFilteredMetadataInformer(r.o.Metadata, nodesResource, metav1.NamespaceAll, 0, cache.Indexers{}, nil)
	if err := nodes.Informer().SetTransform(slimNode(intern.New(nodeLabelStrings))); err != nil {
		r.o.Log.Error("Node informer", "err", err)
		return
	}
	ncFactory := nodeconfiginformers.NewSharedInformerFactory(r.o.NodeConfigClient, 0)
	ncs, ncLister := controller.NodeConfigInformer(ncFactory)
	// Only the ConfigMaps NodeConfigs name are watched (cmwatch); the
	// controller's handler is set once it exists.
	var cmH cache.ResourceEventHandler
	cms := cmwatch.New(r.o.Kube, cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { cmH.OnAdd(obj, false) },
		UpdateFunc: func(old, cur any) { cmH.OnUpdate(old, cur) },
		DeleteFunc: func(obj any) { cmH.OnDelete(obj) },
	}, slim)
	synced := []cache.InformerSynced{nodes.Informer().HasSynced, ncs.HasSynced, cms.HasSynced}

	pool := r.pool
	podFactory := r.agentPodFactory()
	var podInformer cache.SharedIndexInformer
	if podFactory != nil {
		pods := podFactory.Core().V1().Pods()
		pool.Pods, pool.PodSelector, podInformer = pods.Lister(), labels.Everything(), pods.Informer()
		synced = append(synced, podInformer.HasSynced)
	}
	agentPool := agents.New(pool)
	defer agentPool.Close()

	recorder, stopRecording := eventRecorder(ctx, r.o.Kube)
	defer stopRecording()

	historyFactory, store := r.history()
	if historyFactory != nil {
		synced = append(synced, historyFactory.Apps().V1().ControllerRevisions().Informer().HasSynced)
	}

	c := controller.New(controller.Options{
		Kube: r.o.Kube, NodeConfigClient: r.o.NodeConfigClient,
		Nodes:      metadatalister.New(nodes.Informer().GetIndexer(), nodesResource),
		ConfigMaps: cms.Lister(), ConfigMapErr: cms.Err, ConfigMapListed: cms.Listed, NodeConfigs: ncLister, Synced: synced,
		Agents: agentPool, Recorder: recorder, NormalNodeEvents: r.o.NodeEvents == "all", NodeValidationOnly: r.o.NodeValidationOnly, Rules: r.o.Rules,
		Checker: configcheck.Checker{Kubelet: kubeletexec.Runner{Path: r.o.KubeletCheck}.Check},
		Metrics: r.metrics, Log: r.o.Log, History: store,
		BaseDelay: r.o.BaseDelay, MaxDelay: r.o.MaxDelay,
	})
	nodeH, configMapH, ncH, podH := c.Handlers()
	cmH = configMapH // before any watch starts: they start once the NodeConfigs are listed
	_, _ = nodes.Informer().AddEventHandler(nodeH)
	_, _ = ncs.AddEventHandler(ncH)
	watchReferencedConfigMaps(ctx, ncs, ncLister, cms)
	if historyFactory != nil {
		_, _ = historyFactory.Apps().V1().ControllerRevisions().Informer().AddEventHandler(c.HistoryHandler())
		historyFactory.Start(ctx.Done())
		defer historyFactory.Shutdown()
	}
	if podInformer != nil {
		_, _ = podInformer.AddEventHandler(podH)
		podFactory.Start(ctx.Done())
		defer podFactory.Shutdown()
	}
	var nodesRunning sync.WaitGroup
	nodesRunning.Go(func() { nodes.Informer().RunWithContext(ctx) })
	if r.certs != nil {
		// The leader answers the agents' certificate requests.
		var signing sync.WaitGroup
		signing.Go(func() { r.certs.Run(ctx) })
		defer signing.Wait()
	}
	if pool.Tokens != nil {
		// The leader renews the nodes' tokens ahead of use while it leads.
		var renewing sync.WaitGroup
		renewCtx, stopRenewing := context.WithCancel(ctx)
		renewing.Go(func() { pool.Tokens.Run(renewCtx, r.o.Log) })
		defer renewing.Wait()
		defer stopRenewing()
	}
	if pool.Tokens != nil && pool.TokenPrefetch > 0 {
		// Every node's first sync calls its agent with the node's token: a
		// new leader holds none, so it mints them in parallel ahead of its
		// workers, in the order its first pass takes the nodes (the Node
		// listing's, by name).
		var prefetching sync.WaitGroup
		prefetching.Go(func() {
			if !cache.WaitForCacheSync(ctx.Done(), synced...) {
				return
			}
			names := nodes.Informer().GetStore().ListKeys()
			slices.Sort(names)
			start := time.Now()
			minted := agentPool.PrefetchTokens(ctx, names)
			r.o.Log.Info("agent tokens minted ahead of the first pass", "nodes", len(names), "minted", minted, "took", time.Since(start).Round(time.Millisecond))
		})
		defer prefetching.Wait()
	}
	ncFactory.Start(ctx.Done())
	defer nodesRunning.Wait()
	defer ncFactory.Shutdown()
	r.current.Store(c)
	defer r.current.Store(nil)
	if err := c.Run(ctx, r.o.Workers); err != nil {
		r.o.Log.Error("controller stopped", "err", err)
	}
}

// agentPodFactory watches the agent Pods, each trimmed by agentPodOnly,
// when the agents are found in the cluster (each node's agent is the agent
// Pod on it); nil when Addresses or SocketTemplate name them.
func (r *Reconciler) agentPodFactory() informers.SharedInformerFactory {
	a := r.o.Agents
	if len(a.Addresses) != 0 || a.SocketTemplate != "" {
		return nil
	}
	return informers.NewSharedInformerFactoryWithOptions(r.o.Kube, 0, informers.WithNamespace(a.Namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = a.Selector }),
		informers.WithTransform(agentPodOnly))
}

// history watches the NodeConfigs' revisions (those labelled with one, in
// HistoryNamespace) and builds their store; nil, nil when no history is
// kept.
func (r *Reconciler) history() (informers.SharedInformerFactory, *history.Store) {
	if r.o.HistoryNamespace == "" {
		return nil, nil
	}
	f := informers.NewSharedInformerFactoryWithOptions(r.o.Kube, 0, informers.WithNamespace(r.o.HistoryNamespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = v1alpha1.LabelHistoryOf }))
	return f, history.New(r.o.Kube.AppsV1(), f.Apps().V1().ControllerRevisions().Informer().GetIndexer(), r.o.HistoryNamespace, r.o.RevisionHistoryLimit, time.Now)
}

// watchReferencedConfigMaps keeps cms watching the ConfigMaps the
// NodeConfigs name: every NodeConfig change re-derives the set.
func watchReferencedConfigMaps(ctx context.Context, ncs cache.SharedIndexInformer, lister nodeconfiglisters.NodeConfigLister, cms *cmwatch.Watcher) {
	watchReferenced := func() { cms.Sync(ctx, controller.ReferencedConfigMaps(lister)) }
	_, _ = ncs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { watchReferenced() },
		UpdateFunc: func(any, any) { watchReferenced() },
		DeleteFunc: func(any) { watchReferenced() },
	})
	go func() {
		// Once: with no NodeConfig at all, nothing else would start it.
		if cache.WaitForCacheSync(ctx.Done(), ncs.HasSynced) {
			watchReferenced()
		}
	}()
}

// eventRecorder records Events through the API server until stop.
func eventRecorder(ctx context.Context, kube kubernetes.Interface) (recorder record.EventRecorder, stop func()) {
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	return broadcaster.NewRecorder(eventScheme, corev1.EventSource{Component: "nodeconfig-reconciler"}), broadcaster.Shutdown
}

// eventScheme is what the event recorder builds the references of the
// objects Events are recorded on from: client-go's types and NodeConfig's
// (a NodeConfig's Events name it by the Kind and version registered here,
// whatever its TypeMeta says).
var eventScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}()
