package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"nodeconfig.io/services/api/v1alpha1"
)

// ceilingAnnotation is the admin probe's: statusd and the reconciler read
// no annotation but their own, so it is left on the Nodes.
const ceilingAnnotation = "nodeconfig.io/fleet-ceiling-probe"

// The probe's shape: writers enough to keep the API server busy, over
// connections of their own, as many statusds write over theirs.
const (
	ceilingWriters = 64
	ceilingConns   = 8
	ceilingWarmup  = time.Second
)

// ceilingWrite makes the probe's i-th write.
type ceilingWrite func(ctx context.Context, i int64) error

// ceiling is what a write probe measured.
type ceiling struct {
	writers     int     // writing at once
	perSecond   float64 // writes completed a second in the window
	writes      int64   // every write it made, the warm-up's too
	cpuPerWrite float64 // the API server's CPU over the probe per write, µs
}

// writeCeiling measures how many Node writes a second this API server
// takes: each of writers writes, one write after the other, without a
// client-side rate limit, for a warm-up and then window, in which
// completed writes are counted; and the CPU the API server (apiServer, its
// pid) took per write.
func writeCeiling(ctx context.Context, writers []ceilingWrite, window time.Duration, apiServer int) (ceiling, error) {
	before, err := procStat(apiServer)
	if err != nil {
		return ceiling{}, err
	}
	var next, counted atomic.Int64
	start := time.Now()
	from, to := start.Add(ceilingWarmup), start.Add(ceilingWarmup+window)
	var g errgroup.Group
	for _, write := range writers {
		g.Go(func() error {
			for time.Now().Before(to) {
				if err := write(ctx, next.Add(1)); err != nil {
					return fmt.Errorf("ceiling probe: %w", err)
				}
				if now := time.Now(); now.After(from) && now.Before(to) {
					counted.Add(1)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return ceiling{}, err
	}
	after, err := procStat(apiServer)
	if err != nil {
		return ceiling{}, err
	}
	return ceiling{
		writers:     len(writers),
		perSecond:   float64(counted.Load()) / window.Seconds(),
		writes:      next.Load(),
		cpuPerWrite: (after.CPUTime() - before.CPUTime()) / float64(next.Load()) * 1e6,
	}, nil
}

// idleConns closes the probe's connections once their requests are over.
type idleConns []func()

func (c idleConns) close() {
	for _, closeIdle := range c {
		closeIdle()
	}
}

// probeClient is base without a client-side rate limit, over a
// connection of its own (closed by conns.close once idle), under a user
// agent that is not nodeconfig's: the write counts never see it, and it
// runs before they start.
func probeClient(base *rest.Config, conns *idleConns) (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(base)
	cfg.QPS, cfg.Burst = -1, 0
	cfg.UserAgent = "fleet-ceiling-probe"
	cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil } // not client-go's shared transport
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	// client-go's round trippers wrap the transport without passing
	// CloseIdleConnections on: closed through them, nothing would close.
	*conns = append(*conns, func() { utilnet.CloseIdleConnectionsFor(httpClient.Transport) })
	return client, nil
}

// adminCeiling is the write ceiling of ceilingWriters goroutines (at most
// one a Node, two on one Node would wait for each other) over
// ceilingConns connections, patching one annotation of the fleet's n
// Nodes round robin through the status subresource, as the admin: no
// token review, no admission policy.
func adminCeiling(ctx context.Context, base *rest.Config, n int, window time.Duration, apiServer int) (ceiling, error) {
	var conns idleConns
	defer func() { conns.close() }()
	clients := make([]kubernetes.Interface, ceilingConns)
	for i := range clients {
		var err error
		if clients[i], err = probeClient(base, &conns); err != nil {
			return ceiling{}, err
		}
	}
	writers := make([]ceilingWrite, min(ceilingWriters, n))
	for w := range writers {
		client := clients[w%len(clients)]
		writers[w] = func(ctx context.Context, i int64) error {
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, ceilingAnnotation, strconv.FormatInt(i, 10))
			_, err := client.CoreV1().Nodes().Patch(ctx, nodeName(int(i)%n), types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
			return err
		}
	}
	return writeCeiling(ctx, writers, window, apiServer)
}

// probeNodesPerWriter: the agents' probe writes each Node once in so many
// writes of its writer, as a change writes each Node once, not the same
// few over and over.
const probeNodesPerWriter = 8

// probeNodeName is the Node of the agents' probe's k-th agent: not one of
// the fleet's, so no statusd repairs what the probe writes, and without the
// fleet's label, so no NodeConfig selects it.
func probeNodeName(k int) string { return fmt.Sprintf("ceiling-probe-%03d", k) }

// agentWriters write as the agents write in a change: ceilingWriters
// writers, each taking turns over probeNodesPerWriter agents of its own.
// Each agent has a connection of its own with statusd's token bound to a
// Node of its own (created here, deleted by the returned cleanup), watches
// that Node, and patches its status as statusd does (a strategic-merge
// patch by statusd's field manager that changes the config-status
// annotation and the NodeConfigReady condition); so each write is
// authenticated as statusd, authorized, checked by statusd's admission
// policy, and sent to a watcher. With kubeletLike the Nodes are dressed as
// the fleet's are (-kubelet-like-nodes): a status patch's cost grows with
// the Node it rewrites.
func agentWriters(ctx context.Context, admin kubernetes.Interface, base *rest.Config, kubeletLike bool) ([]ceilingWrite, func(), error) {
	names := make([]string, ceilingWriters*probeNodesPerWriter)
	for k := range names {
		names[k] = probeNodeName(k)
	}
	watching, stopWatching := context.WithCancel(ctx)
	var conns idleConns
	var drained sync.WaitGroup
	cleanup := func() {
		stopWatching()
		drained.Wait() // each watch's stream is over, its connection idle
		conns.close()
		_ = forEach(len(names), 32, func(k int) error {
			_ = admin.CoreV1().Nodes().Delete(context.Background(), names[k], metav1.DeleteOptions{})
			return nil
		})
	}
	if err := forEach(len(names), 32, func(k int) error {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: names[k], Labels: map[string]string{}}}
		if kubeletLike {
			kubeletLikeNode(node, k)
		}
		_, err := admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		return err
	}); err != nil {
		cleanup()
		return nil, nil, err
	}
	tokens, err := boundTokens(ctx, base, statusAccount, names)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	patches := make([]func(ctx context.Context, i int64) error, len(names))
	for k, name := range names {
		client, err := probeClient(asAgent(base, tokens[k]), &conns)
		if err != nil {
			cleanup()
			return nil, nil, err
		}
		// As statusd watches its own Node: every write is also an event
		// the API server sends to that Node's watcher.
		watch, err := client.CoreV1().Nodes().Watch(watching, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
		if err != nil {
			cleanup()
			return nil, nil, fmt.Errorf("watch %s: %w", name, err)
		}
		drained.Go(func() {
			for range watch.ResultChan() {
			}
		})
		patches[k] = func(ctx context.Context, i int64) error {
			patch, err := statusPatch(i)
			if err != nil {
				return err
			}
			_, err = client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch,
				metav1.PatchOptions{FieldManager: "nodeconfig-statusd"}, "status")
			return err
		}
	}
	writers := make([]ceilingWrite, ceilingWriters)
	for w := range writers {
		turn := 0
		writers[w] = func(ctx context.Context, i int64) error {
			turn = (turn + 1) % probeNodesPerWriter
			return patches[w+turn*ceilingWriters](ctx, i)
		}
	}
	return writers, cleanup, nil
}

// statusPatch is a patch of statusd's shape, its i-th: a new config-status
// annotation and NodeConfigReady condition.
func statusPatch(i int64) ([]byte, error) {
	src := &corev1.NodeConfigSource{ConfigMap: &corev1.ConfigMapNodeConfigSource{
		Namespace: namespace, Name: configMapName, UID: "00000000-0000-0000-0000-000000000000",
		ResourceVersion: strconv.FormatInt(i, 10), KubeletConfigKey: configMapKey,
	}}
	status, err := v1alpha1.EncodeNodeConfigStatus(corev1.NodeConfigStatus{Assigned: src, Active: src, LastKnownGood: src})
	if err != nil {
		return nil, err
	}
	now := metav1.Now()
	return json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{v1alpha1.NodeAnnotationConfigStatus: status}},
		"status": map[string]any{"conditions": []corev1.NodeCondition{{
			Type: v1alpha1.NodeConditionConfigReady, Status: corev1.ConditionTrue, Reason: "Soaking",
			Message:           fmt.Sprintf("ConfigMap %s/%s key %s (resourceVersion %d) is active and on trial", namespace, configMapName, configMapKey, i),
			LastHeartbeatTime: now, LastTransitionTime: now,
		}}},
	})
}

// agentCeiling is the write ceiling of agentWriters, whose Nodes are gone
// when it returns.
func agentCeiling(ctx context.Context, admin kubernetes.Interface, base *rest.Config, kubeletLike bool, window time.Duration, apiServer int) (ceiling, error) {
	writers, cleanup, err := agentWriters(ctx, admin, base, kubeletLike)
	if err != nil {
		return ceiling{}, fmt.Errorf("the agents' write probe: %w", err)
	}
	defer cleanup()
	return writeCeiling(ctx, writers, window, apiServer)
}
