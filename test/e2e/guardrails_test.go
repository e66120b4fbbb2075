package e2e

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/framework/sim"
)

// floodHosts are the loopback addresses a test's flood comes from, as
// from 8 other hosts.
var floodHosts = func() []string {
	var hosts []string
	for i := 2; i <= 9; i++ {
		hosts = append(hosts, fmt.Sprintf("127.0.0.%d", i))
	}
	return hosts
}()

// metricsNode is one secure node whose checkpointd and statusd also serve
// their metrics over TLS with --metrics-auth=token, as the agent's
// DaemonSet runs checkpointd's on the node's address (statusd's, on its
// own Pod's, is plain in deploy/, and guarded the same way where an
// operator turns it on).
type metricsNode struct {
	*secureEnv
	node                               *sim.Node
	checkpointdMetrics, statusdMetrics string
}

func newMetricsNode(t *testing.T) *metricsNode {
	t.Helper()
	ck, err := proc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	st, err := proc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	e := newSecureNodesWith(t, 1, func(int) sim.NodeOptions {
		return sim.NodeOptions{
			CheckpointdArgs: []string{"--metrics-addr", ck, "--metrics-auth=token"},
			StatusdArgs:     []string{"--metrics-addr", st, "--metrics-auth=token"},
		}
	})
	m := &metricsNode{secureEnv: e, node: e.nodes[0], checkpointdMetrics: ck, statusdMetrics: st}
	for _, addr := range []string{ck, st} {
		client := m.httpsFrom("127.0.0.1")
		if err := proc.WaitFor(30*time.Second, func() (bool, error) {
			code, err := httpGet(client, "https://"+addr+"/healthz", "")
			return code == http.StatusOK, fmt.Errorf("/healthz at %s: %d %v", addr, code, err)
		}); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// tlsConfig trusts the agent CA only.
func (e *secureEnv) tlsConfig() *tls.Config {
	e.t.Helper()
	ca, err := os.ReadFile(e.tls.CAFile)
	if err != nil {
		e.t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return &tls.Config{RootCAs: pool, ServerName: e.tls.ServerName}
}

// httpsFrom is an HTTPS client that connects from a loopback address.
func (e *secureEnv) httpsFrom(local string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
	tr := &http.Transport{TLSClientConfig: e.tlsConfig(), DialContext: d.DialContext, MaxIdleConnsPerHost: 1}
	e.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Timeout: 10 * time.Second, Transport: tr}
}

// dialTLSFrom connects to target over TLS as dialTLS does, from a loopback
// address.
func (e *secureEnv) dialTLSFrom(target, local string) *grpc.ClientConn {
	e.t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(credentials.NewTLS(e.tlsConfig())),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func httpGet(client *http.Client, url, bearer string) (int, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// apiCall is the part of an audit event these tests count by.
type apiCall struct {
	Stage      string `json:"stage"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	UserAgent  string `json:"userAgent"`
	ObjectRef  struct {
		Resource string `json:"resource"`
	} `json:"objectRef"`
	Received time.Time `json:"requestReceivedTimestamp"`
}

// apiCalls counts the completed requests of the shared API server's audit
// log that match, received at or after since.
func (e *env) apiCalls(since time.Time, match func(apiCall) bool) int {
	e.t.Helper()
	f, err := os.Open(filepath.Join(e.c.Dir, "audit.log"))
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	n := 0
	for sc.Scan() {
		var c apiCall
		if json.Unmarshal(sc.Bytes(), &c) == nil && c.Stage == "ResponseComplete" && !c.Received.Before(since) && match(c) {
			n++
		}
	}
	if err := sc.Err(); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// lastCall is when the last request that matches was received (zero if
// none was).
func (e *env) lastCall(match func(apiCall) bool) time.Time {
	e.t.Helper()
	var last time.Time
	e.apiCalls(time.Time{}, func(c apiCall) bool {
		if match(c) && c.Received.After(last) {
			last = c.Received
		}
		return false
	})
	return last
}

func tokenReviewsBy(userAgent string) func(apiCall) bool {
	return func(c apiCall) bool {
		return c.Verb == "create" && c.ObjectRef.Resource == "tokenreviews" && strings.HasPrefix(c.UserAgent, userAgent)
	}
}

func keyReadsBy(userAgent string) func(apiCall) bool {
	return func(c apiCall) bool {
		return strings.HasPrefix(c.RequestURI, "/openid/v1/jwks") && strings.HasPrefix(c.UserAgent, userAgent)
	}
}

// The user agents of a node's agents: the metrics guards' clients add
// " metrics-auth".
func agentUserAgents(node string) []string {
	return []string{"nodeconfig-checkpointd", "nodeconfig-statusd/" + node}
}

// metricsReader is a ServiceAccount RBAC allows to get /metrics; it
// returns a token of it.
func (e *secureEnv) metricsReader() string {
	e.t.Helper()
	rbac := e.c.Client.RbacV1()
	if _, err := e.c.Client.CoreV1().ServiceAccounts("nodeconfig-system").Create(e.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "guardrails-reader"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		e.t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "nodeconfig-test-guardrails-reader"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
	if _, err := rbac.ClusterRoles().Create(e.ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		e.t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "nodeconfig-system", Name: "guardrails-reader"}}}
	if _, err := rbac.ClusterRoleBindings().Create(e.ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		_ = rbac.ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
		_ = rbac.ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
	})
	tr, err := e.c.Client.CoreV1().ServiceAccounts("nodeconfig-system").CreateToken(e.ctx, "guardrails-reader", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return tr.Status.Token
}

// junkTokens are n bearer tokens that can never pass, of four kinds in
// turn: not a JWT; a JWT of a key the cluster does not have (an unknown key
// id); a JWT that names the cluster's own key id with another key's
// signature; a JWT longer than any ServiceAccount token.
func (e *secureEnv) junkTokens(n int) []string {
	e.t.Helper()
	raw, err := e.c.Client.CoreV1().RESTClient().Get().AbsPath("/openid/v1/jwks").DoRaw(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(raw, &set); err != nil || len(set.Keys) == 0 {
		e.t.Fatalf("the cluster's keys %s: %v", raw, err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		e.t.Fatal(err)
	}
	signer := func(kid string) jose.Signer {
		s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, (&jose.SignerOptions{}).WithHeader("kid", kid))
		if err != nil {
			e.t.Fatal(err)
		}
		return s
	}
	unknown, impostor := signer("not-the-clusters"), signer(set.Keys[0].KeyID)
	mint := func(s jose.Signer, i int, pad string) string {
		tok, err := jwt.Signed(s).Claims(map[string]any{
			"sub": "system:serviceaccount:evil:flood-" + strconv.Itoa(i), "exp": time.Now().Add(time.Hour).Unix(), "pad": pad,
		}).Serialize()
		if err != nil {
			e.t.Fatal(err)
		}
		return tok
	}
	tokens := make([]string, n)
	for i := range tokens {
		switch i % 4 {
		case 0:
			tokens[i] = "junk-" + strconv.Itoa(i)
		case 1:
			tokens[i] = mint(unknown, i, "")
		case 2:
			tokens[i] = mint(impostor, i, "")
		case 3:
			tokens[i] = mint(unknown, i, strings.Repeat("x", 5<<10))
		}
	}
	return tokens
}

// 10,000 junk bearer tokens at a node's two metrics ports (checkpointd's
// and statusd's), from 8 hosts, while the reconciler rolls a change to the
// node: every one is refused with no TokenReview at all, the change is
// promoted in the time an unflooded rollout gets in this suite, the 2,500
// tokens of a key the cluster does not have cost each agent one read of
// the keys (the read a key rotation needs), and a reader RBAC allows is
// still served.
func TestJunkTokensAtTheMetricsPortsCostNoReviewAndARolloutPromotes(t *testing.T) {
	const junk = 10000
	m := newMetricsNode(t)
	n := m.node
	// The agents know the cluster's keys once they have read them; a token
	// of a key they do not know has them read again, at most every 30 s
	// (authn's keysUnknownRetry): the flood starts once that is due, so
	// that it shows the one read a key rotation needs.
	if err := proc.WaitFor(60*time.Second, func() (bool, error) {
		for _, ua := range agentUserAgents(n.Name) {
			last := m.lastCall(keyReadsBy(ua))
			if last.IsZero() || time.Since(last) < 31*time.Second {
				return false, fmt.Errorf("%s last read the keys at %v", ua, last)
			}
		}
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	tokens := m.junkTokens(junk)
	reader := m.metricsReader()
	m.startReconciler("r0", m.reconcilerArgs(reconcilerSA)...)

	start := time.Now()
	var next atomic.Int64
	var promotedYet atomic.Bool
	var mu sync.Mutex
	codes := map[string]int{}
	var wg sync.WaitGroup
	for i, host := range floodHosts {
		client := m.httpsFrom(host)
		port := []string{m.checkpointdMetrics, m.statusdMetrics}[i%2]
		wg.Go(func() {
			// At least the 10,000, and on until the rollout is done.
			for {
				k := int(next.Add(1)) - 1
				if k >= junk && promotedYet.Load() {
					return
				}
				code, err := httpGet(client, "https://"+port+"/metrics", tokens[k%junk])
				what := strconv.Itoa(code)
				if err != nil {
					what = err.Error()
				}
				mu.Lock()
				codes[what]++
				mu.Unlock()
			}
		})
	}

	cm := m.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	m.nodeConfig(m.label, map[string]any{
		"source":      map[string]any{"configMap": map[string]any{"namespace": m.ns, "name": "cfg", "key": "config.yaml"}},
		"soakSeconds": 1,
	}, nil)
	m.waitNode(n.Name, 30*time.Second, "promoted during the flood", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.LastKnownGood) == cm.ResourceVersion && reasonIs(c, "Active")
	})
	promoted := time.Since(start)
	promotedYet.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	var metricsReviews, rolloutReviews, keyReads []int
	for _, ua := range agentUserAgents(n.Name) {
		metricsReviews = append(metricsReviews, m.apiCalls(start, tokenReviewsBy(ua+" metrics-auth")))
		rolloutReviews = append(rolloutReviews, m.apiCalls(start, tokenReviewsBy(ua))-metricsReviews[len(metricsReviews)-1])
		keyReads = append(keyReads, m.apiCalls(start, keyReadsBy(ua)))
	}

	client := m.httpsFrom("127.0.0.1")
	for _, addr := range []string{m.checkpointdMetrics, m.statusdMetrics} {
		if err := proc.WaitFor(30*time.Second, func() (bool, error) {
			code, err := httpGet(client, "https://"+addr+"/metrics", reader)
			return code == http.StatusOK, fmt.Errorf("the reader at %s: %d %v", addr, code, err)
		}); err != nil {
			t.Error(err)
		}
	}

	sent := 0
	for _, c := range codes {
		sent += c
	}
	t.Logf("%d junk tokens in %v: %v; promoted after %v; TokenReviews of the metrics guards %v, of the gRPC guards %v; reads of the keys %v (checkpointd, statusd)",
		sent, elapsed.Round(time.Millisecond), codes, promoted.Round(time.Millisecond), metricsReviews, rolloutReviews, keyReads)
	if sent < junk || codes["401"] != sent {
		t.Errorf("%d junk tokens were answered %v; want at least %d, all 401", sent, codes, junk)
	}
	// The rollout's own reviews: one per new token of the reconciler.
	if total := metricsReviews[0] + metricsReviews[1] + rolloutReviews[0] + rolloutReviews[1]; total > 5 {
		t.Errorf("the agents sent %d TokenReviews during the flood; the rollout needs one or two", total)
	}
	for i, ua := range agentUserAgents(n.Name) {
		if metricsReviews[i] != 0 {
			t.Errorf("%s's metrics guard sent %d TokenReviews for junk tokens; want 0", ua, metricsReviews[i])
		}
		// One read at once for an unknown key, then at most one per 30 s.
		if bound := 1 + int(elapsed/(30*time.Second)); keyReads[i] < 1 || keyReads[i] > bound {
			t.Errorf("%s read the keys %d times for %d tokens of an unknown key in %v; want 1 (at most %d)", ua, keyReads[i], junk/4, elapsed, bound)
		}
	}
}

// Callers on 8 hosts, each holding its share of the agent's gRPC
// connections (16) with a health Check and a Watch on each (health needs no
// token for a Check; a Watch without one is refused, the connection stays),
// do not lock the reconciler out: it activates a change on the node.
func TestHealthWatchesFromEightAddressesDoNotBlockActivate(t *testing.T) {
	e := newSecureNodes(t, 1)
	n := e.nodes[0]
	const perHost = 16 // the agent's per-host share
	var conns []*grpc.ClientConn
	var watches atomic.Int64
	var wg sync.WaitGroup
	for _, host := range floodHosts {
		for range perHost {
			conn := e.dialTLSFrom(n.CheckpointdAddr, host)
			conns = append(conns, conn)
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
				defer cancel()
				health := healthpb.NewHealthClient(conn)
				// Not waiting for ready: a connection refused is done with.
				if _, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
					return
				}
				w, err := health.Watch(e.ctx, &healthpb.HealthCheckRequest{})
				if err == nil {
					if _, err := w.Recv(); err == nil {
						watches.Add(1)
						go func() {
							for {
								if _, err := w.Recv(); err != nil {
									return
								}
							}
						}()
					}
				}
			})
		}
	}
	wg.Wait()
	open := 0
	for _, c := range conns {
		if c.GetState() == connectivity.Ready {
			open++
		}
	}
	t.Logf("%d connections open from %d hosts; %d health Watches served", open, len(floodHosts), watches.Load())

	start := time.Now()
	e.startReconciler("r0", e.reconcilerArgs(reconcilerSA)...)
	cm := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.nodeConfig(e.label, map[string]any{
		"source":      map[string]any{"configMap": map[string]any{"namespace": e.ns, "name": "cfg", "key": "config.yaml"}},
		"soakSeconds": 1,
	}, nil)
	e.waitNode(n.Name, 30*time.Second, "activated and promoted while the connections are held", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.LastKnownGood) == cm.ResourceVersion && reasonIs(c, "Active")
	})
	t.Logf("promoted after %v", time.Since(start).Round(time.Millisecond))
}

// vmRSS is a process's resident set size now, in bytes.
func vmRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// A header bomb from 8 hosts at every port of a node's agents, once they
// have served a few callers (first use costs the TLS and HTTP/2 machinery
// a few MiB, whoever calls): at the metrics ports, 128 connections a host
// each sending 8 KiB of headers and never the end of them, or 12 KiB; at
// checkpointd's gRPC port, 32 connections a host each opening 32 calls
// with 7.5 KiB of metadata (a health Check that never sends its request,
// a Watch, an RPC). Until every connection is gone, neither process's
// resident memory grows by 10 MiB.
func TestHeaderBombAddsUnder10MiBToTheAgentsRSS(t *testing.T) {
	const bound = 10 << 20
	m := newMetricsNode(t)
	n := m.node
	procs := map[string]int{"checkpointd": n.Checkpointd.Pid(), "statusd": n.Statusd.Pid()}
	padding := metadata.Pairs("x-pad", strings.Repeat("b", 7<<10+512))

	// A caller on each host, as the reconciler and the scrapers are.
	for _, host := range floodHosts {
		conn := m.dialTLSFrom(n.CheckpointdAddr, host)
		cctx, ccancel := context.WithTimeout(metadata.NewOutgoingContext(m.ctx, padding), 10*time.Second)
		_, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		ccancel()
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.Close()
		client := m.httpsFrom(host)
		for _, addr := range []string{m.checkpointdMetrics, m.statusdMetrics} {
			if code, err := httpGet(client, "https://"+addr+"/healthz", ""); code != http.StatusOK {
				t.Fatalf("/healthz at %s from %s: %d %v", addr, host, code, err)
			}
		}
		client.CloseIdleConnections()
	}
	// Then the baseline, once the processes' memory holds still.
	before := map[string]int64{}
	for name, pid := range procs {
		last := int64(-1)
		if err := wait.PollUntilContextTimeout(m.ctx, 500*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			rss, err := vmRSS(pid)
			steady := err == nil && last >= 0 && rss-last < 256<<10 && last-rss < 256<<10
			last = rss
			return steady, err
		}); err != nil {
			t.Fatalf("%s's RSS did not hold still (last %d KiB): %v", name, last>>10, err)
		}
		before[name] = last
	}

	// Sampled from before the first connection to after the last is gone.
	peak := map[string]int64{}
	var samples atomic.Int64
	sampled, stopSampling := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			for name, pid := range procs {
				if rss, err := vmRSS(pid); err == nil {
					peak[name] = max(peak[name], rss)
				}
			}
			samples.Add(1)
			select {
			case <-stopSampling:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()

	ctx, cancel := context.WithCancel(m.ctx)
	defer cancel()
	var held atomic.Int64
	var wg, sent sync.WaitGroup
	pad := func(size int) string {
		var b strings.Builder
		for i := 0; b.Len() < size; i++ {
			fmt.Fprintf(&b, "X-Pad-%d: %s\r\n", i, strings.Repeat("a", 200))
		}
		return b.String()
	}
	slow, tooBig := pad(8<<10), pad(12<<10)
	for _, host := range floodHosts {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(host)}, Timeout: 5 * time.Second}
		for _, addr := range []string{m.checkpointdMetrics, m.statusdMetrics} {
			for i := range 128 {
				sent.Add(1)
				wg.Go(func() {
					written := sync.OnceFunc(sent.Done)
					defer written()
					c, err := tls.DialWithDialer(d, "tcp", addr, m.tlsConfig())
					if err != nil {
						return
					}
					defer c.Close()
					headers := "GET /metrics HTTP/1.1\r\nHost: agent\r\n"
					if i%2 == 0 {
						headers += slow
					} else {
						headers += tooBig + "\r\n"
					}
					if _, err := io.WriteString(c, headers); err != nil {
						return
					}
					held.Add(1)
					written()
					<-ctx.Done()
				})
			}
		}
		for range 32 {
			conn := m.dialTLSFrom(n.CheckpointdAddr, host)
			for i := range 32 {
				sent.Add(1)
				wg.Go(func() {
					sent := sync.OnceFunc(sent.Done)
					defer sent()
					cctx, ccancel := context.WithTimeout(metadata.NewOutgoingContext(ctx, padding), 30*time.Second)
					defer ccancel()
					switch i % 3 {
					case 0:
						// Never sends its request: held until cut or refused.
						s, err := conn.NewStream(cctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/grpc.health.v1.Health/Check")
						sent()
						if err == nil {
							_ = s.RecvMsg(&healthpb.HealthCheckResponse{})
						}
					case 1:
						if w, err := healthpb.NewHealthClient(conn).Watch(cctx, &healthpb.HealthCheckRequest{}); err == nil {
							_, _ = w.Recv()
						}
					case 2:
						_ = call(cctx, conn, "/nodeconfig.v1.CheckpointService/GetRecords", false, "")
					}
				})
			}
		}
	}
	// Every call answered or held, every slow connection holding its
	// headers.
	sent.Wait()
	// More samples while they are held.
	after := samples.Load() + 20
	if err := proc.WaitFor(10*time.Second, func() (bool, error) { return samples.Load() >= after, nil }); err != nil {
		t.Fatal(err)
	}
	cancel()
	wg.Wait()
	close(stopSampling)
	<-sampled
	for name := range procs {
		grown := peak[name] - before[name]
		t.Logf("%s: RSS %.1f MiB before, %.1f MiB at most during the bomb (+%.2f MiB); %d metrics connections got their headers written",
			name, float64(before[name])/(1<<20), float64(peak[name])/(1<<20), float64(grown)/(1<<20), held.Load())
		if grown >= bound {
			t.Errorf("%s's RSS grew by %.1f MiB under a header bomb; want under %d MiB", name, float64(grown)/(1<<20), bound>>20)
		}
	}
}
