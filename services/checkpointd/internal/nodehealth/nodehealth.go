// Package nodehealth is the agent's default health gate: through a config's
// soak, the node's Ready condition stays True, its pressure conditions stay
// False, and the pods that were Ready before the trial are Ready again
// within a bound. It judges from the API server's view of this node alone,
// which the agent watches (its Node, its pods), so it judges, and the agent
// rolls back, with no reconciler running.
package nodehealth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/checkpointd/internal/consumer"
	"nodeconfig.io/services/configcheck/healthcel"
)

// Options configure the gate.
type Options struct {
	Kube kubernetes.Interface
	// Node is this node's name.
	Node string
	// PodsReadyTimeout is how long after the kubelet's restart the pods
	// Ready before it have to be Ready again.
	PodsReadyTimeout time.Duration
	Log              *slog.Logger
	// Now is the clock (tests); time.Now when nil.
	Now func() time.Time
}

// Gate judges this node from its Node object and its pods.
type Gate struct {
	o      Options
	nodes  corelisters.NodeLister
	pods   corelisters.PodLister
	synced []cache.InformerSynced

	mu sync.Mutex
	// watchErr is the last failure to list or watch, and when: while
	// recent, what the caches hold may be stale, and nothing is judged.
	watchErr   error
	watchErrAt time.Time
	// cel is the last CEL gate compiled.
	cel *healthcel.Program
	// prom is the client of the last Prometheus gate, at promURL.
	prom    promv1.API
	promURL string
	// backReady are the pods of the trial that restarted at restartedAt
	// seen Ready again: a pod that later turns unready of itself (its
	// database down) is no longer the config's doing.
	backReady   map[string]bool
	restartedAt time.Time
}

// pressures are the Node conditions a config on trial must keep False.
var pressures = []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure}

// staleAfterError is how long a list or watch failure makes the caches
// suspect: longer than the reflector's longest backoff between retries, so
// an API server that stays down keeps the gate holding.
const staleAfterError = time.Minute

// maxNamed is how many pods a message names before it counts the rest.
const maxNamed = 5

// readyGrace is how long the Node may say it is not Ready after the
// kubelet's restart before the config is blamed: a restarted kubelet can
// post NotReady until its runtime and network checks pass, and the node
// lifecycle controller's Unknown lingers until its next heartbeat. The
// soak holds meanwhile.
const readyGrace = time.Minute

// nodeShutdown are the reasons the kubelet's graceful node shutdown gives
// the pods it ends: a reboot, not the config.
var nodeShutdown = []string{"Terminated", "Shutdown", "NodeShutdown"}

// Start watches the node and its pods until ctx ends.
func Start(ctx context.Context, o Options) (*Gate, error) {
	if o.Node == "" {
		return nil, fmt.Errorf("the node's health gate needs the node's name")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	g := &Gate{o: o}
	own := func(field string) informers.SharedInformerOption {
		return informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector(field, o.Node).String()
		})
	}
	nodeInformers := informers.NewSharedInformerFactoryWithOptions(o.Kube, 0, own("metadata.name"))
	podInformers := informers.NewSharedInformerFactoryWithOptions(o.Kube, 0, own("spec.nodeName"))
	nodes := nodeInformers.Core().V1().Nodes()
	pods := podInformers.Core().V1().Pods()
	for _, inf := range []cache.SharedIndexInformer{nodes.Informer(), pods.Informer()} {
		if err := inf.SetWatchErrorHandler(g.noteWatchError); err != nil {
			return nil, err
		}
		g.synced = append(g.synced, inf.HasSynced)
	}
	g.nodes, g.pods = nodes.Lister(), pods.Lister()
	nodeInformers.Start(ctx.Done())
	podInformers.Start(ctx.Done())
	return g, nil
}

func (g *Gate) noteWatchError(_ *cache.Reflector, err error) {
	if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		// A routine relist: the cache is listed again at once.
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.watchErr, g.watchErrAt = err, g.o.Now()
	g.o.Log.Warn("the node's health gate cannot watch the API server: it holds soaks until it can", "err", err)
}

// unreadable says why the caches cannot be trusted now, "" when they can.
func (g *Gate) unreadable() string {
	for _, synced := range g.synced {
		if !synced() {
			return "the Node and its pods are not read from the API server yet"
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.watchErr != nil && g.o.Now().Sub(g.watchErrAt) < staleAfterError {
		return fmt.Sprintf("the API server cannot be read (%v): the Node's conditions and its pods are not known", g.watchErr)
	}
	return ""
}

// ReadyPods names the node's pods that are Running and Ready now.
func (g *Gate) ReadyPods() ([]string, error) {
	if why := g.unreadable(); why != "" {
		return nil, fmt.Errorf("%s", why)
	}
	all, err := g.pods.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var ready []string
	for _, p := range all {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(p) {
			ready = append(ready, podKey(p.Namespace, p.Name, string(p.UID)))
		}
	}
	sort.Strings(ready)
	return ready, nil
}

// Judge implements consumer.Health.
func (g *Gate) Judge(before []string, restarted time.Time, gates *nodeconfigv1.HealthGates) consumer.Verdict {
	if why := g.unreadable(); why != "" {
		return consumer.Verdict{Hold: true, Message: why}
	}
	node, err := g.nodes.Get(g.o.Node)
	if err != nil {
		return consumer.Verdict{Hold: true, Message: fmt.Sprintf("the Node %s cannot be read: %v", g.o.Node, err)}
	}
	var failed, held []string
	f, h := judgeConditions(node, restarted, g.o.Now())
	failed, held = append(failed, f...), append(held, h...)
	f, h = g.judgePods(before, restarted)
	failed, held = append(failed, f...), append(held, h...)
	f, h = g.judgeGates(node, restarted, gates)
	failed, held = append(failed, f...), append(held, h...)
	switch {
	case len(failed) > 0:
		return consumer.Verdict{Failed: true, Message: strings.Join(failed, "; ")}
	case len(held) > 0:
		return consumer.Verdict{Hold: true, Message: strings.Join(held, "; ")}
	}
	return consumer.Verdict{}
}

// judgeConditions fails a Node that is not Ready or under pressure since
// the restart; one that already was before it is held, not blamed: the
// config did not cause it.
func judgeConditions(node *corev1.Node, restarted, now time.Time) (failed, held []string) {
	check := func(typ corev1.NodeConditionType, want corev1.ConditionStatus) {
		c := condition(node, typ)
		if c == nil {
			if typ == corev1.NodeReady {
				held = append(held, "the Node has no Ready condition yet")
			}
			return
		}
		if c.Status == want || (typ != corev1.NodeReady && c.Status == corev1.ConditionUnknown) {
			// A pressure the kubelet does not report (Unknown) says nothing
			// of the config: Ready says whether the kubelet reports at all.
			return
		}
		said := fmt.Sprintf("the Node's %s is %s since %s (%s: %s)", typ, c.Status, c.LastTransitionTime.UTC().Format(time.RFC3339), c.Reason, c.Message)
		if c.LastTransitionTime.Time.Before(restarted) {
			held = append(held, said+", from before the kubelet's restart: not the config's doing")
			return
		}
		if typ == corev1.NodeReady && now.Sub(c.LastTransitionTime.Time) < readyGrace {
			held = append(held, said+fmt.Sprintf(": waiting up to %s for the restarted kubelet to report Ready", readyGrace))
			return
		}
		failed = append(failed, said)
	}
	check(corev1.NodeReady, corev1.ConditionTrue)
	for _, p := range pressures {
		check(p, corev1.ConditionFalse)
	}
	return failed, held
}

// judgePods fails the trial for pods that were Ready before it and are not
// again within the bound, or that ended (evicted, rejected at the kubelet's
// admission); it holds while they may still come back. Pods deleted or
// replaced by their owners, or that finished, are not the config's fault.
func (g *Gate) judgePods(before []string, restarted time.Time) (failed, held []string) {
	if before == nil {
		return nil, nil
	}
	deadline := restarted.Add(g.o.PodsReadyTimeout)
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.restartedAt.Equal(restarted) {
		g.backReady, g.restartedAt = map[string]bool{}, restarted
	}
	var ended, waiting []string
	for _, key := range before {
		ns, name, uid, ok := splitKey(key)
		if !ok {
			continue
		}
		p, err := g.pods.Pods(ns).Get(name)
		if err != nil || string(p.UID) != uid || p.DeletionTimestamp != nil {
			continue
		}
		switch {
		case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
			if why, ok := endedByTheNode(p); ok {
				ended = append(ended, fmt.Sprintf("%s/%s (%s: %s)", ns, name, p.Status.Phase, why))
			}
		case podReady(p):
			g.backReady[key] = true
		case g.backReady[key]:
			// Ready again after the restart, unready since of itself.
		default:
			waiting = append(waiting, fmt.Sprintf("%s/%s (%s%s)", ns, name, p.Status.Phase, notReadyWhy(p)))
		}
	}
	if len(ended) > 0 {
		failed = append(failed, fmt.Sprintf("%d of the %d pods Ready before the trial ended on it: %s", len(ended), len(before), names(ended)))
	}
	if len(waiting) == 0 {
		return failed, nil
	}
	if !g.o.Now().Before(deadline) {
		failed = append(failed, fmt.Sprintf("%d of the %d pods Ready before the trial are not Ready %s after the kubelet's restart: %s",
			len(waiting), len(before), g.o.PodsReadyTimeout, names(waiting)))
		return failed, nil
	}
	held = append(held, fmt.Sprintf("waiting until %s for %d of the %d pods Ready before the trial to be Ready again: %s",
		deadline.UTC().Format(time.RFC3339), len(waiting), len(before), names(waiting)))
	return failed, held
}

// endedByTheNode says whether a pod that ended was ended by its node (the
// kubelet evicted, preempted or rejected it), and how, rather than by its
// own work: a pod that restarts always never ends of itself, and one that
// may end says so by ending without the kubelet's reason.
func endedByTheNode(p *corev1.Pod) (string, bool) {
	if slices.Contains(nodeShutdown, p.Status.Reason) {
		return "", false
	}
	why := p.Status.Reason
	if p.Status.Message != "" {
		why += ": " + p.Status.Message
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return strings.TrimPrefix(why+"; "+c.Reason+": "+c.Message, "; "), true
		}
	}
	switch {
	case p.Status.Reason != "":
		return why, true
	case p.Spec.RestartPolicy == corev1.RestartPolicyAlways || p.Spec.RestartPolicy == "":
		return "a pod that restarts always ended", true
	}
	return "", false
}

func condition(node *corev1.Node, typ corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == typ {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// notReadyWhy is the pod's Ready condition's reason, where it has one.
func notReadyWhy(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Reason != "" {
			return ", " + c.Reason
		}
	}
	return ""
}

func podKey(ns, name, uid string) string { return ns + "/" + name + "/" + uid }

func splitKey(key string) (ns, name, uid string, ok bool) {
	parts := strings.Split(key, "/")
	if len(parts) != 3 {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

// names lists the first few and counts the rest.
func names(all []string) string {
	if len(all) <= maxNamed {
		return strings.Join(all, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(all[:maxNamed], ", "), len(all)-maxNamed)
}
