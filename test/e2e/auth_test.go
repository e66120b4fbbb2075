package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/credentials/oauth"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/test/framework/cluster"
	"nodeconfig.io/test/framework/pki"
	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/framework/sim"
)

const (
	// agentAudience names the node: a token's reach is one node.
	agentAudience = "nodeconfig-agent/{node}"
	reconcilerSA  = "nodeconfig-reconciler"
)

// audienceOf is the audience of one node's agent.
func audienceOf(node string) string { return strings.ReplaceAll(agentAudience, "{node}", node) }

// secureEnv is one node whose checkpointd and statusd serve TCP with TLS
// and --auth=token, verifying tokens with the shared API server's
// TokenReview, as the DaemonSet runs them.
type secureEnv struct {
	*env
	tls pki.AgentTLS
}

func newSecureEnv(t *testing.T) *secureEnv { return newSecureNodes(t, 1) }

func newSecureNodes(t testing.TB, n int) *secureEnv { return newSecureNodesWith(t, n, nil) }

// newSecureNodesWith is newSecureNodes with more flags for node i's
// checkpointd and statusd (more may be nil).
func newSecureNodesWith(t testing.TB, n int, more func(i int) sim.NodeOptions) *secureEnv {
	t.Helper()
	dir, err := os.MkdirTemp("", "nc-tls-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	agentTLS, err := pki.NewAgentTLS(dir)
	if err != nil {
		t.Fatal(err)
	}
	auth := []string{"--auth=token", "--auth-audience", agentAudience, "--tls-cert-file", agentTLS.CertFile, "--tls-key-file", agentTLS.KeyFile}
	e := newNodes(t, n, func(i int) sim.NodeOptions {
		o := sim.NodeOptions{
			CheckpointdArgs: append([]string{"--kubeconfig", cluster.Shared.Kubeconfig}, auth...),
			StatusdArgs:     auth,
		}
		if more != nil {
			m := more(i)
			o.CheckpointdArgs = append(o.CheckpointdArgs, m.CheckpointdArgs...)
			o.StatusdArgs = append(append([]string(nil), o.StatusdArgs...), m.StatusdArgs...)
		}
		return o
	})
	if err := sim.EnsureNamespace(e.ctx, e.c, "nodeconfig-system"); err != nil {
		t.Fatal(err)
	}
	for _, sa := range []string{reconcilerSA, "intruder"} {
		_, err := e.c.Client.CoreV1().ServiceAccounts("nodeconfig-system").Create(e.ctx,
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	return &secureEnv{env: e, tls: agentTLS}
}

// token mints a ServiceAccount token as the kubelet projects it.
func (e *secureEnv) token(sa string, audiences ...string) string {
	e.t.Helper()
	tr, err := e.c.Client.CoreV1().ServiceAccounts("nodeconfig-system").CreateToken(e.ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return tr.Status.Token
}

// reconcilerArgs point a reconciler at every node's TCP port, over TLS,
// with per-node tokens of ServiceAccount sa, as the Deployment runs it.
func (e *secureEnv) reconcilerArgs(sa string) []string {
	args := []string{"--agent-ca-file", e.tls.CAFile, "--agent-tls-server-name", e.tls.ServerName,
		"--agent-token-audience", agentAudience, "--agent-token-service-account", "nodeconfig-system/" + sa}
	for _, n := range e.nodes {
		args = append(args, "--agent-address", n.Name+"="+n.CheckpointdAddr)
	}
	return args
}

// dialTLS connects as the reconciler does: trusting only the agent CA.
func (e *secureEnv) dialTLS(target string) *grpc.ClientConn {
	e.t.Helper()
	creds, err := credentials.NewClientTLSFromFile(e.tls.CAFile, e.tls.ServerName)
	if err != nil {
		e.t.Fatal(err)
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// call invokes method with an empty request (the guard runs before any
// request validation) and returns the status code.
func call(ctx context.Context, conn *grpc.ClientConn, method string, streaming bool, token string) codes.Code {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var opts []grpc.CallOption
	if token != "" {
		opts = append(opts, grpc.PerRPCCredentials(oauth.TokenSource{TokenSource: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: token})}))
	}
	if !streaming {
		return status.Code(conn.Invoke(ctx, method, &emptypb.Empty{}, &emptypb.Empty{}, opts...))
	}
	s, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, method, opts...)
	if err == nil {
		if err = s.SendMsg(&emptypb.Empty{}); err == nil {
			_ = s.CloseSend()
			err = s.RecvMsg(&emptypb.Empty{})
		}
	}
	return status.Code(err)
}

type rpc struct {
	method    string
	streaming bool
}

func methods(desc grpc.ServiceDesc) []rpc {
	var out []rpc
	for _, m := range desc.Methods {
		out = append(out, rpc{"/" + desc.ServiceName + "/" + m.MethodName, false})
	}
	for _, s := range desc.Streams {
		out = append(out, rpc{"/" + desc.ServiceName + "/" + s.StreamName, true})
	}
	return out
}

// Every RPC of both agent services, over TLS, against the real TokenReview:
// no token and a token minted for another audience are Unauthenticated, a
// good token of another ServiceAccount is PermissionDenied; the reconciler's
// token and the local unix socket get through; health stays open for probes.
func TestAgentRPCsRefuseUnauthenticatedAndWrongIdentityCallers(t *testing.T) {
	e := newSecureEnv(t)
	node := e.nodes[0]
	callers := []struct {
		name  string
		token string
		want  codes.Code // codes.OK: anything but a refusal
	}{
		{"no token", "", codes.Unauthenticated},
		{"garbage token", "not-a-jwt", codes.Unauthenticated},
		{"reconciler token for the API server's audience", e.token(reconcilerSA), codes.Unauthenticated},
		{"another ServiceAccount's agent token", e.token("intruder", audienceOf(node.Name)), codes.PermissionDenied},
		{"the reconciler's token for another node", e.token(reconcilerSA, audienceOf("some-other-node")), codes.Unauthenticated},
		{"the reconciler's token for the shared audience of old", e.token(reconcilerSA, "nodeconfig-agent"), codes.Unauthenticated},
		{"the reconciler's agent token", e.token(reconcilerSA, audienceOf(node.Name)), codes.OK},
	}
	services := []struct {
		addr, socket string
		desc         grpc.ServiceDesc
	}{
		{node.CheckpointdAddr, node.Socket, nodeconfigv1.CheckpointService_ServiceDesc},
		{node.StatusdAddr, node.StatusdSocket, nodeconfigv1.StatusService_ServiceDesc},
	}
	tried := 0
	for _, svc := range services {
		conn := e.dialTLS(svc.addr)
		local, err := sim.Dial("unix://" + svc.socket)
		if err != nil {
			t.Fatal(err)
		}
		defer local.Close()
		for _, m := range methods(svc.desc) {
			for _, c := range callers {
				got := call(e.ctx, conn, m.method, m.streaming, c.token)
				tried++
				refused := got == codes.Unauthenticated || got == codes.PermissionDenied
				if (c.want == codes.OK && refused) || (c.want != codes.OK && got != c.want) {
					t.Errorf("%s by %s over TLS: code %v, want %v", m.method, c.name, got, c.want)
				}
			}
			if got := call(e.ctx, local, m.method, m.streaming, ""); got == codes.Unauthenticated || got == codes.PermissionDenied {
				t.Errorf("%s over the unix socket: refused with %v", m.method, got)
			}
		}
		if got := call(e.ctx, conn, "/grpc.health.v1.Health/Check", false, ""); got != codes.OK {
			t.Errorf("health over TLS without a token: %v, want OK (kubelet probes)", got)
		}
		// Without TLS the server's handshake fails: nothing is served in clear.
		plain, err := grpc.NewClient(svc.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		if got := call(e.ctx, plain, methods(svc.desc)[0].method, false, ""); got != codes.Unavailable {
			t.Errorf("plaintext call to %s: %v, want Unavailable", svc.addr, got)
		}
		_ = plain.Close()
	}
	t.Logf("%d protected calls checked", tried)
}

// A reconciler with the agent CA and per-node tokens of its own
// ServiceAccount drives two nodes that require TLS and TokenReview all the
// way to promotion; the same reconciler requesting another ServiceAccount's
// tokens gets nowhere. A token the reconciler sent to node A is refused by
// node B.
func TestReconcilerDrivesAuthenticatedAgentOverTLS(t *testing.T) {
	e := newSecureNodes(t, 2)
	a, b := e.nodes[0], e.nodes[1]
	e.startReconciler("r0", e.reconcilerArgs("intruder")...)
	cm := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.nodeConfig(e.label, map[string]any{
		"source":      map[string]any{"configMap": map[string]any{"namespace": e.ns, "name": "cfg", "key": "config.yaml"}},
		"soakSeconds": 1,
	}, nil)
	var last *nodeconfigv1.NodeState
	if err := proc.WaitFor(20*time.Second, func() (bool, error) {
		last = e.nodeState(a.Name)
		return strings.Contains(last.GetError(), "PermissionDenied") && last.GetFailures() >= 2, nil
	}); err != nil {
		t.Fatalf("the reconciler with another identity should be refused: %v; last state %v", err, last)
	}
	for _, n := range e.nodes {
		if _, ok := n.Target(); ok {
			t.Fatalf("a reconciler with the wrong identity got a config written on %s", n.Name)
		}
	}
	e.reconciler.Close()
	e.reconciler = nil

	e.startReconciler("r1", e.reconcilerArgs(reconcilerSA)...)
	for _, n := range e.nodes {
		e.waitNode(n.Name, 30*time.Second, "promoted over TLS", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
			return rv(st.LastKnownGood) == cm.ResourceVersion && reasonIs(c, "Active")
		})
	}

	// What the reconciler presents to A (a token of its own ServiceAccount
	// for A's audience, as a capture on node A would yield) opens A only.
	forA := e.token(reconcilerSA, audienceOf(a.Name))
	method := "/nodeconfig.v1.CheckpointService/GetRecords"
	if got := call(e.ctx, e.dialTLS(a.CheckpointdAddr), method, false, forA); got != codes.OK {
		t.Fatalf("node A refused its own token: %v", got)
	}
	if got := call(e.ctx, e.dialTLS(b.CheckpointdAddr), method, false, forA); got != codes.Unauthenticated {
		t.Fatalf("node B answered node A's token with %v, want Unauthenticated", got)
	}
}
