// Command reconciler enforces the config lifecycle across the fleet: it
// watches NodeConfigs, Nodes, ConfigMaps and agent Pods and drives each
// node's checkpointd. See the repository README.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"
	// Maintenance windows name IANA time zones; the image has no zoneinfo.
	_ "time/tzdata"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/agents"
	"nodeconfig.io/services/reconciler/internal/cmwatch"
	"nodeconfig.io/services/reconciler/internal/controller"
	"nodeconfig.io/services/reconciler/internal/grpcapi"
	"nodeconfig.io/services/servekit"
)

func main() { servekit.Main(run) }

// maxTokenNodes bounds the per-node agent tokens kept (about 1 KiB each):
// above the largest fleet measured, so a sync never waits on a new token
// for want of room.
const maxTokenNodes = 1 << 15

type agentAddresses map[string]string

func (a agentAddresses) String() string { return fmt.Sprint(map[string]string(a)) }
func (a agentAddresses) Set(v string) error {
	node, addr, ok := strings.Cut(v, "=")
	if !ok || node == "" || addr == "" {
		return fmt.Errorf("want NODE=HOST:PORT or NODE=unix:///path, got %q", v)
	}
	a[node] = addr
	return nil
}

// slim drops what the reconciler never reads from cached objects.
func slim(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	if n, ok := obj.(*corev1.Node); ok {
		n.Status = corev1.NodeStatus{}
	}
	return obj, nil
}

// agentPodOnly keeps of an agent Pod what finding its node's agent needs:
// its node, address, readiness and whether it is going away.
func agentPodOnly(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	slimPod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
			Labels: pod.Labels, DeletionTimestamp: pod.DeletionTimestamp},
		Spec:   corev1.PodSpec{NodeName: pod.Spec.NodeName},
		Status: corev1.PodStatus{PodIP: pod.Status.PodIP},
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			slimPod.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	return slimPod, nil
}

func run() error {
	fs := flag.NewFlagSet("reconciler", flag.ContinueOnError)
	var sf servekit.Flags
	sf.Register(fs, "127.0.0.1:7603", "127.0.0.1:9603")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file; empty means in-cluster config")
	static := agentAddresses{}
	fs.Var(static, "agent-address", "a node's checkpointd as NODE=HOST:PORT or NODE=unix:///path (repeatable; local runs and tests)")
	socketTemplate := fs.String("agent-socket-template", "", "unix socket path of each node's checkpointd with {node} in it (local runs and tests)")
	agentNamespace := fs.String("agent-namespace", "nodeconfig-system", "namespace of the agent pods (in-cluster discovery)")
	agentSelector := fs.String("agent-selector", "app.kubernetes.io/name=nodeconfig-agent", "label selector of the agent pods")
	agentPort := fs.Int("agent-port", 7601, "checkpointd's gRPC port in the agent pods")
	agentCA := fs.String("agent-ca-file", "", "CA (PEM) of the agents' serving certificates; set, agent calls use TLS")
	agentServerName := fs.String("agent-tls-server-name", "nodeconfig-agent.nodeconfig-system.svc", "name the agents' certificate is checked against")
	agentAudience := fs.String("agent-token-audience", "", "audience of the token sent to each agent, with {node} in it (e.g. nodeconfig-agent/{node}): each node's token is refused by every other node; empty sends none")
	agentAccount := fs.String("agent-token-service-account", "", "NAMESPACE/NAME of the ServiceAccount whose tokens the reconciler requests for the agents (its own)")
	agentTokenLifetime := fs.Duration("agent-token-lifetime", agents.DefaultTokenLifetime, "life asked for each node's token (at least 10m: the API server refuses a shorter TokenRequest); a token is replaced at 80 % of the life granted")
	agentTokenRenewAfter := fs.Duration("agent-token-renew-after", 0, "replace each node's token this long after it was minted, if sooner than 80 % of its life (0: at 80 %; tests, to see renewals within seconds)")
	nodeValidationOnly := fs.Bool("node-validation-only", false, "do not validate a new version before assigning it; leave validation to the nodes (on activation), e.g. while their validator is newer than this reconciler's")
	nodeEvents := fs.String("node-events", "warnings", "which node transitions become Events: warnings (rollbacks, failures, drift) or all (also activated and promoted, two API writes per node per change)")
	maxConns := fs.Int("agent-max-connections", 256, "most agent connections kept open (least recently used closed first)")
	workers := fs.Int("workers", 16, "concurrent node syncs (each mostly waits on its agent, so more than the cores)")
	baseDelay := fs.Duration("retry-base-delay", 2*time.Second, "first retry delay after an early error (doubles per failure)")
	maxDelay := fs.Duration("retry-max-delay", 2*time.Minute, "cap of the retry delay")
	leaderElect := fs.Bool("leader-elect", true, "elect one active replica through a Lease")
	leaseNamespace := fs.String("leader-elect-namespace", "nodeconfig-system", "namespace of the Lease")
	leaseName := fs.String("leader-elect-name", "nodeconfig-reconciler", "name of the Lease")
	leaseDuration := fs.Duration("leader-elect-lease-duration", 15*time.Second, "how long a lost leader's lease blocks the others")
	renewDeadline := fs.Duration("leader-elect-renew-deadline", 10*time.Second, "how long the leader keeps trying to renew before giving up")
	retryPeriod := fs.Duration("leader-elect-retry-period", 2*time.Second, "how often candidates try to acquire the lease")
	identity := fs.String("identity", "", "leader election identity (default hostname_pid)")
	if err := servekit.Parse(fs, "reconciler", "Rolls NodeConfigs out to nodes: checkpoint, assign, activate, soak, promote, roll back."); err != nil {
		return err
	}
	log, err := sf.Logger("reconciler")
	if err != nil {
		return err
	}
	restCfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("kubernetes client config: %w", err)
	}
	restCfg.UserAgent = "nodeconfig-reconciler"
	restCfg.QPS, restCfg.Burst = 100, 200
	kube, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	if *nodeEvents != "warnings" && *nodeEvents != "all" {
		return fmt.Errorf("--node-events %q: want warnings or all", *nodeEvents)
	}
	var agentTokens *agents.NodeTokens
	if *agentAudience != "" {
		ns, name, ok := strings.Cut(*agentAccount, "/")
		if !ok || ns == "" || name == "" {
			return fmt.Errorf("--agent-token-service-account %q: want NAMESPACE/NAME (needed with --agent-token-audience)", *agentAccount)
		}
		if agentTokens, err = agents.NewNodeTokens(kube.CoreV1().ServiceAccounts(ns), name, *agentAudience, maxTokenNodes,
			agents.TokenOptions{Lifetime: *agentTokenLifetime, RenewAfter: *agentTokenRenewAfter}); err != nil {
			return fmt.Errorf("--agent-token-audience, --agent-token-lifetime, --agent-token-renew-after: %w", err)
		}
	}
	agentDial, err := agents.Credentials(*agentCA, *agentServerName, *agentAudience != "")
	if err != nil {
		return err
	}
	if *identity == "" {
		host, _ := os.Hostname()
		*identity = fmt.Sprintf("%s_%d", host, os.Getpid())
	}

	sf.TokenReviews = kube.AuthenticationV1().TokenReviews()
	sf.SigningKeys = servekit.SigningKeys(kube.AuthenticationV1().RESTClient())
	sf.MetricsClients = servekit.MetricsClients{Authentication: kube.AuthenticationV1(), Authorization: kube.AuthorizationV1()}
	srv, err := servekit.New(sf, log)
	if err != nil {
		return err
	}
	metrics := controller.NewMetrics(srv.Registry)
	var current atomic.Pointer[controller.Controller]
	nodeconfigv1.RegisterReconcilerServiceServer(srv.GRPC, &grpcapi.Service{Nodes: func() grpcapi.Nodes {
		if c := current.Load(); c != nil {
			return c
		}
		return nil
	}})

	lead := func(ctx context.Context) {
		// The cached objects lose what the reconciler never reads: managed
		// fields, and on Nodes the image list and status (real Nodes carry
		// kilobytes of them, times the fleet).
		factory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithTransform(slim))
		nodes := factory.Core().V1().Nodes()
		dynFactory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
		ncs := dynFactory.ForResource(v1alpha1.GroupVersionResource)
		// Only the ConfigMaps NodeConfigs name are watched (cmwatch); the
		// controller's handler is set once it exists.
		var cmH cache.ResourceEventHandler
		cms := cmwatch.New(kube, cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { cmH.OnAdd(obj, false) },
			UpdateFunc: func(old, cur any) { cmH.OnUpdate(old, cur) },
			DeleteFunc: func(obj any) { cmH.OnDelete(obj) },
		}, slim)
		synced := []cache.InformerSynced{nodes.Informer().HasSynced, ncs.Informer().HasSynced, cms.HasSynced}

		pool := agents.Options{Static: static, SocketTemplate: *socketTemplate, Port: *agentPort, DialOptions: agentDial, MaxConnections: *maxConns, Tokens: agentTokens}
		var podFactory informers.SharedInformerFactory
		var podInformer cache.SharedIndexInformer
		if len(static) == 0 && *socketTemplate == "" {
			// In a cluster: each node's agent is the agent Pod on it.
			podFactory = informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(*agentNamespace),
				informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = *agentSelector }),
				informers.WithTransform(agentPodOnly))
			pods := podFactory.Core().V1().Pods()
			pool.Pods, pool.PodSelector, podInformer = pods.Lister(), labels.Everything(), pods.Informer()
			synced = append(synced, podInformer.HasSynced)
		}
		agentPool := agents.New(pool)
		defer agentPool.Close()

		broadcaster := record.NewBroadcaster(record.WithContext(ctx))
		broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
		defer broadcaster.Shutdown()
		recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "nodeconfig-reconciler"})

		c := controller.New(controller.Options{
			Kube: kube, Dynamic: dyn,
			Nodes: nodes.Lister(), ConfigMaps: cms.Lister(), ConfigMapErr: cms.Err, NodeConfigs: ncs.Lister(), Synced: synced,
			Agents: agentPool, Recorder: recorder, NormalNodeEvents: *nodeEvents == "all", NodeValidationOnly: *nodeValidationOnly, Metrics: metrics, Log: log,
			BaseDelay: *baseDelay, MaxDelay: *maxDelay,
		})
		nodeH, configMapH, ncH, podH := c.Handlers()
		cmH = configMapH // before any watch starts: they start once the NodeConfigs are listed
		_, _ = nodes.Informer().AddEventHandler(nodeH)
		_, _ = ncs.Informer().AddEventHandler(ncH)
		// Every NodeConfig change re-derives the set of watched ConfigMaps.
		watchReferenced := func() { cms.Sync(ctx, controller.ReferencedConfigMaps(ncs.Lister())) }
		_, _ = ncs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { watchReferenced() },
			UpdateFunc: func(any, any) { watchReferenced() },
			DeleteFunc: func(any) { watchReferenced() },
		})
		go func() {
			// Once: with no NodeConfig at all, nothing else would start it.
			if cache.WaitForCacheSync(ctx.Done(), ncs.Informer().HasSynced) {
				watchReferenced()
			}
		}()
		if podInformer != nil {
			_, _ = podInformer.AddEventHandler(podH)
			podFactory.Start(ctx.Done())
			defer podFactory.Shutdown()
		}
		factory.Start(ctx.Done())
		dynFactory.Start(ctx.Done())
		defer factory.Shutdown()
		defer dynFactory.Shutdown()
		current.Store(c)
		defer current.Store(nil)
		if err := c.Run(ctx, *workers); err != nil {
			log.Error("controller stopped", "err", err)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if *leaderElect {
		lock, err := resourcelock.New(resourcelock.LeasesResourceLock, *leaseNamespace, *leaseName,
			kube.CoreV1(), kube.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: *identity})
		if err != nil {
			return err
		}
		election := leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: *leaseDuration, RenewDeadline: *renewDeadline, RetryPeriod: *retryPeriod,
			ReleaseOnCancel: true, Name: *leaseName,
			Callbacks: leaderelection.LeaderCallbacks{
				// lead's context ends when the lease is lost, and lead builds
				// its whole view anew each time, so a replica that lost the
				// lease (an API server outage, say) simply stands again.
				OnStartedLeading: lead,
				OnStoppedLeading: func() { log.Info("not leading; standing for election again") },
				OnNewLeader:      func(id string) { log.Info("leader", "identity", id) },
			},
		}
		go func() {
			for ctx.Err() == nil {
				elector, err := leaderelection.NewLeaderElector(election)
				if err != nil {
					log.Error("leader election", "err", err)
					cancel()
					return
				}
				elector.Run(ctx)
			}
		}()
	} else {
		go lead(ctx)
	}
	return srv.Serve(ctx, nodeconfigv1.ReconcilerService_ServiceDesc.ServiceName)
}
