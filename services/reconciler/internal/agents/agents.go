// Package agents finds each node's checkpointd and keeps one gRPC
// connection per address. In a cluster the address is the agent Pod's IP on
// that node; locally and in tests it comes from flags.
package agents

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/utils/lru"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// idleTimeout is how long a node's connection stays up without calls.
const idleTimeout = 30 * time.Second

// Options say where agents are.
type Options struct {
	// Static maps node names to gRPC targets (--agent-address NODE=HOST:PORT).
	Static map[string]string
	// SocketTemplate is a unix socket path with {node} (--agent-socket-template).
	SocketTemplate string
	// Pods lists agent pods (label selector applied by the lister's informer).
	Pods        corelisters.PodLister
	PodSelector labels.Selector
	Port        int
	// Transport gives the transport credentials of one node's connection
	// (Credentials); nil dials in clear text.
	Transport Transport
	// MaxConnections bounds the open connections (least recently used
	// closed first), so memory does not grow with the fleet; default
	// DefaultMaxConnections.
	MaxConnections int
	// Tokens, when set, authenticates every call with a token for the
	// called node alone.
	Tokens *NodeTokens
	// TokenPrefetch is how many TokenRequests PrefetchTokens makes at a
	// time (0: it mints none, each token is minted on its node's first
	// call).
	TokenPrefetch int
}

// Transport gives the transport credentials of a node's connection.
type Transport func(node string) credentials.TransportCredentials

// Credentials are the transport of an in-cluster reconciler: TLS that
// trusts only the agents' CA, each agent's certificate checked for the
// name serverName gives for its node ({node} in it is the node's name), so
// that an agent serving another node's certificate fails the handshake,
// before any token is sent. The CA file is reread when it changes, so
// rotating the Secret needs no restart. Tokens (see NodeTokens) are never
// sent without TLS.
func Credentials(caFile, serverName string, tokens bool) (Transport, error) {
	if caFile == "" {
		if tokens {
			return nil, errors.New("agent tokens need --agent-ca-file: a token must not cross the network in clear text")
		}
		return nil, nil
	}
	ca := &caFileCache{path: caFile}
	if _, err := ca.pool(); err != nil {
		return nil, fmt.Errorf("--agent-ca-file: %w", err)
	}
	return func(node string) credentials.TransportCredentials {
		return verifyingTLS(ca, ServerName(serverName, node))
	}, nil
}

// ServerName is the name node's agent certificate must carry: serverName
// with {node} replaced by the node's name.
func ServerName(serverName, node string) string {
	return strings.ReplaceAll(serverName, "{node}", node)
}

// Pool resolves and connects, one connection per node, keeping the most
// recently used ones open.
type Pool struct {
	o     Options
	mu    sync.Mutex
	conns *lru.Cache // node name -> *agentConn
	// unused are connections no caller holds any more, closed by unlock
	// once mu is released: a close takes its time, and the workers
	// releasing theirs would queue behind it.
	unused []*grpc.ClientConn
}

// unlock releases p.mu, then closes the connections left unused meanwhile.
func (p *Pool) unlock() {
	unused := p.unused
	p.unused = nil
	p.mu.Unlock()
	for _, conn := range unused {
		_ = conn.Close()
	}
}

// agentConn is one node's connection. A connection leaves the cache
// (evicted, replaced, forgotten) while a sync may still be using it, so it
// is closed only once no caller holds it. Guarded by Pool.mu.
type agentConn struct {
	target  string
	conn    *grpc.ClientConn
	users   int
	evicted bool
}

// DefaultMaxConnections bounds the open agent connections unless told
// otherwise. A connection costs about 50 KiB (buffers, HTTP/2 header
// tables, goroutine stacks) and a sync holds one, so 64 is four times the
// default workers: more cost memory and save no CPU on a large rollout,
// where every node is reconnected either way (docs/performance.md).
const DefaultMaxConnections = 64

// New builds a pool.
func New(o Options) *Pool {
	if o.MaxConnections <= 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	// The cache calls this under Pool.mu: every change of it happens there.
	p := &Pool{o: o}
	p.conns = lru.NewWithEvictionFunc(o.MaxConnections, func(_ lru.Key, v any) {
		c := v.(*agentConn)
		c.evicted = true
		if c.users == 0 {
			p.unused = append(p.unused, c.conn)
		}
	})
	return p
}

// conn returns the open connection of a node, if any.
func (p *Pool) conn(node string) (*agentConn, bool) {
	v, ok := p.conns.Get(node)
	if !ok {
		return nil, false
	}
	return v.(*agentConn), true
}

// Target returns the gRPC target of a node's checkpointd.
func (p *Pool) Target(node string) (string, error) {
	if t, ok := p.o.Static[node]; ok {
		return t, nil
	}
	if p.o.SocketTemplate != "" {
		return "unix://" + strings.ReplaceAll(p.o.SocketTemplate, "{node}", node), nil
	}
	if p.o.Pods == nil {
		return "", fmt.Errorf("no agent address known for node %s", node)
	}
	pods, err := p.o.Pods.List(p.o.PodSelector)
	if err != nil {
		return "", err
	}
	for _, pod := range pods {
		if pod.Spec.NodeName == node && pod.Status.PodIP != "" && pod.DeletionTimestamp == nil && PodReady(pod) {
			return net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(p.o.Port)), nil
		}
	}
	return "", fmt.Errorf("no ready agent pod on node %s", node)
}

// PodReady says whether an agent Pod's Ready condition is true.
func PodReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// For returns a client for a node's checkpointd and the release the caller
// calls once done with it; the connection stays open until then, even if
// it leaves the pool meanwhile.
func (p *Pool) For(node string) (nodeconfigv1.CheckpointServiceClient, func(), error) {
	target, err := p.Target(node)
	if err != nil {
		return nil, nil, err
	}
	p.mu.Lock()
	defer p.unlock()
	c, ok := p.conn(node)
	if ok && c.target != target {
		// The agent pod moved (new pod IP): the old connection would only
		// keep redialing a dead address.
		p.conns.Remove(node)
		ok = false
	}
	if !ok {
		var transport credentials.TransportCredentials = insecure.NewCredentials()
		if p.o.Transport != nil {
			transport = p.o.Transport(node)
		}
		// One connection per node adds up at fleet scale: share write
		// buffers between flushes, keep the read buffer small (payloads
		// are read in one go anyway), and let a node's connection go idle
		// (no goroutines, no transport) between its syncs.
		opts := []grpc.DialOption{grpc.WithTransportCredentials(transport),
			grpc.WithSharedWriteBuffer(true), grpc.WithReadBufferSize(4 << 10), grpc.WithIdleTimeout(idleTimeout)}
		if p.o.Tokens != nil {
			opts = append(opts, grpc.WithPerRPCCredentials(p.o.Tokens.For(node)))
		}
		conn, err := grpc.NewClient(target, opts...)
		if err != nil {
			return nil, nil, fmt.Errorf("agent %s: %w", target, err)
		}
		c = &agentConn{target: target, conn: conn}
		p.conns.Add(node, c)
	}
	c.users++
	var once sync.Once
	release := func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.unlock()
			c.users--
			if c.users == 0 && c.evicted {
				p.unused = append(p.unused, c.conn)
			}
		})
	}
	return nodeconfigv1.NewCheckpointServiceClient(c.conn), release, nil
}

// PrefetchTokens mints, in the order given, the tokens of the nodes whose
// agent is known (Target) and that hold none yet, TokenPrefetch at a time
// (NodeTokens.Prefetch); it returns how many of them were minted.
func (p *Pool) PrefetchTokens(ctx context.Context, nodes []string) int {
	if p.o.Tokens == nil || p.o.TokenPrefetch <= 0 {
		return 0
	}
	return p.o.Tokens.Prefetch(ctx, p.withAgent(nodes), p.o.TokenPrefetch)
}

// StandByTokens mints, one at a time, the tokens of the nodes whose agent
// is known and that hold none yet (NodeTokens.StandBy); it returns how
// many of them were minted.
func (p *Pool) StandByTokens(ctx context.Context, nodes []string) int {
	if p.o.Tokens == nil {
		return 0
	}
	return p.o.Tokens.StandBy(ctx, p.withAgent(nodes))
}

// withAgent is nodes without those whose agent is not known (Target).
func (p *Pool) withAgent(nodes []string) []string {
	hasAgent := func(node string) bool {
		_, err := p.Target(node)
		return err == nil
	}
	if len(p.o.Static) == 0 && p.o.SocketTemplate == "" && p.o.Pods != nil {
		// Found in the cluster: one listing for the fleet, not one per node.
		pods, err := p.o.Pods.List(p.o.PodSelector)
		if err != nil {
			return nil
		}
		ready := make(map[string]bool, len(pods))
		for _, pod := range pods {
			if pod.Status.PodIP != "" && pod.DeletionTimestamp == nil && PodReady(pod) {
				ready[pod.Spec.NodeName] = true
			}
		}
		hasAgent = func(node string) bool { return ready[node] }
	}
	return slices.DeleteFunc(slices.Clone(nodes), func(node string) bool { return !hasAgent(node) })
}

// Forget closes the connection of a node that is gone.
func (p *Pool) Forget(node string) {
	p.mu.Lock()
	defer p.unlock()
	p.conns.Remove(node)
	if p.o.Tokens != nil {
		p.o.Tokens.Forget(node)
	}
}

// Close closes every connection.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.unlock()
	p.conns.Clear()
}
