package realnode_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/test/realnode"
)

// An attacker with root on the node reads the agents' tokens from the
// kubelet's directory: statusd's Pod's and checkpointd's. With statusd's
// they may write their own Node's NodeConfigReady condition and
// config-status annotation and record Events about it, and nothing else;
// with checkpointd's, root on the host, only cordon their own Node (a
// drain's) and evict pods as a drain does. Every attempt is a server-side
// dry run, so the install is not changed by it. The agent's gRPC port
// takes only the reconciler's token minted for this node.
func attackWithTheAgentsTokens(ctx context.Context, t *testing.T) {
	t.Helper()
	admin := node.Cluster.Client
	statusdToken, checkpointdToken := podToken(ctx, t, "nodeconfig-status"), podToken(ctx, t, "nodeconfig-agent")
	statusd, checkpointd := tokenClient(t, statusdToken), tokenClient(t, checkpointdToken)
	other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "attacker-other-node"}}
	if _, err := admin.CoreV1().Nodes().Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), other.Name, metav1.DeleteOptions{}) }()

	dry := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	statusPatch := func(c kubernetes.Interface, nodeName, p string) error {
		_, err := c.CoreV1().Nodes().Patch(ctx, nodeName, types.StrategicMergePatchType, []byte(p), dry, "status")
		return err
	}
	event := func(c kubernetes.Interface, ns string, about corev1.ObjectReference) error {
		_, err := c.CoreV1().Events(ns).Create(ctx, &corev1.Event{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "forged-"}, InvolvedObject: about, Type: corev1.EventTypeWarning, Reason: "X", Message: "forged",
		}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	ownNode := corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: realnode.NodeName}
	own := `{"metadata":{"annotations":{"` + v1alpha1.NodeAnnotationConfigStatus + `":"{}"}},"status":{"conditions":[{"type":"NodeConfigReady","status":"False","reason":"X","message":"forged"}]}}`

	// statusd's token: its own Node's condition and annotation, Events
	// about its own Node, and nothing else.
	if err := statusPatch(statusd, realnode.NodeName, own); err != nil {
		t.Errorf("statusd's token cannot write its own condition and annotation: %v", err)
	}
	for what, p := range map[string]string{
		"a label":             `{"metadata":{"labels":{"x":"y"}}}`,
		"another annotation":  `{"metadata":{"annotations":{"x":"y"}}}`,
		"an owner reference":  `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"gone","uid":"00000000-0000-0000-0000-000000000001"}]}}`,
		"a finalizer":         `{"metadata":{"finalizers":["example.com/hold"]}}`,
		"the Ready condition": `{"status":{"conditions":[{"type":"Ready","status":"False","reason":"X","message":"m"}]}}`,
		"the allocatable":     `{"status":{"allocatable":{"cpu":"512"}}}`,
	} {
		if err := statusPatch(statusd, realnode.NodeName, p); err == nil {
			t.Errorf("statusd's token changed %s of its own Node", what)
		}
	}
	if err := statusPatch(statusd, other.Name, own); err == nil {
		t.Error("statusd's token wrote another Node's condition")
	}
	for what, p := range map[string]string{
		"taints":        `{"spec":{"taints":[{"key":"x","effect":"NoSchedule"}]}}`,
		"unschedulable": `{"spec":{"unschedulable":true}}`,
		"a label":       `{"metadata":{"labels":{"x":"y"}}}`,
	} {
		if _, err := statusd.CoreV1().Nodes().Patch(ctx, realnode.NodeName, types.MergePatchType, []byte(p), dry); err == nil {
			t.Errorf("statusd's token changed %s of its Node", what)
		}
	}
	if err := event(statusd, "default", ownNode); err != nil {
		t.Errorf("statusd's token cannot record an Event about its own Node: %v", err)
	}
	for what, try := range map[string]func() error{
		"record an Event about another Node": func() error {
			return event(statusd, "default", corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: other.Name})
		},
		"record an Event about a Pod": func() error {
			return event(statusd, namespace, corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: namespace, Name: "nodeconfig-reconciler"})
		},
		"record an Event about its Node elsewhere": func() error {
			return event(statusd, namespace, ownNode)
		},
	} {
		if err := try(); err == nil {
			t.Errorf("statusd's token may %s", what)
		}
	}

	// checkpointd's token, bound to the same Node: none of statusd's
	// writes, refused by RBAC before any policy.
	if err := statusPatch(checkpointd, realnode.NodeName, own); !apierrors.IsForbidden(err) {
		t.Errorf("checkpointd's token writing its own Node's condition and annotation: %v, want Forbidden", err)
	}
	if err := event(checkpointd, "default", ownNode); !apierrors.IsForbidden(err) {
		t.Errorf("checkpointd's token recording an Event about its own Node: %v, want Forbidden", err)
	}
	// A drain's cordon: its own Node's, no other's, and nothing else of it.
	cordon := []byte(`{"spec":{"unschedulable":true}}`)
	if _, err := checkpointd.CoreV1().Nodes().Patch(ctx, realnode.NodeName, types.MergePatchType, cordon, dry); err != nil {
		t.Errorf("checkpointd's token cannot cordon its own Node: %v", err)
	}
	if _, err := checkpointd.CoreV1().Nodes().Patch(ctx, other.Name, types.MergePatchType, cordon, dry); err == nil {
		t.Error("checkpointd's token cordoned another Node")
	}
	for what, p := range map[string]string{
		"taints":        `{"spec":{"taints":[{"key":"x","effect":"NoSchedule"}]}}`,
		"a label":       `{"metadata":{"labels":{"x":"y"}}}`,
		"an annotation": `{"metadata":{"annotations":{"x":"y"}}}`,
	} {
		if _, err := checkpointd.CoreV1().Nodes().Patch(ctx, realnode.NodeName, types.MergePatchType, []byte(p), dry); err == nil {
			t.Errorf("checkpointd's token changed %s of its Node", what)
		}
	}

	// Neither token reads secrets or the config of other NodeConfigs, nor
	// mints tokens.
	for who, c := range map[string]kubernetes.Interface{"statusd's": statusd, "checkpointd's": checkpointd} {
		for what, try := range map[string]func() error{
			"list Secrets": func() error {
				_, err := c.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
				return err
			},
			"read the agents' CA Secret": func() error {
				_, err := c.CoreV1().Secrets(namespace).Get(ctx, "nodeconfig-agent-ca", metav1.GetOptions{})
				return err
			},
			"list ConfigMaps": func() error {
				_, err := c.CoreV1().ConfigMaps("kube-system").List(ctx, metav1.ListOptions{})
				return err
			},
			"mint the reconciler's tokens": func() error {
				_, err := c.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, "nodeconfig-reconciler",
					&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"nodeconfig-agent/" + other.Name}}},
					metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
				return err
			},
			"mint the agents' tokens": func() error {
				for _, sa := range []string{"nodeconfig-agent", "nodeconfig-status"} {
					if _, err := c.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa,
						&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"nodeconfig-agent/" + realnode.NodeName}}},
						metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err == nil {
						return nil
					}
				}
				return errors.New("refused")
			},
		} {
			if err := try(); err == nil {
				t.Errorf("%s token may %s", who, what)
			}
		}
	}

	// The agent's own gRPC port: the reconciler's token for this node is
	// taken, one for another node and the agents' own are refused.
	call := func(token string) error {
		ctx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
		_, err := agentClient(ctx, t).GetRecords(ctx, &nodeconfigv1.GetRecordsRequest{})
		return err
	}
	if err := call(reconcilerToken(ctx, t, realnode.NodeName)); err != nil {
		t.Errorf("the agent refused the reconciler's token for its node: %v", err)
	}
	for what, token := range map[string]string{
		"the reconciler's token for another node": reconcilerToken(ctx, t, other.Name),
		"checkpointd's Pod's own token":           checkpointdToken,
		"statusd's Pod's token":                   statusdToken,
	} {
		if err := call(token); status.Code(err) != codes.Unauthenticated && status.Code(err) != codes.PermissionDenied {
			t.Errorf("the agent's port with %s: %v, want Unauthenticated or PermissionDenied", what, err)
		}
	}
}

// podToken reads the ServiceAccount token of the install's Pod labelled
// app.kubernetes.io/name=app where the kubelet projects it on the host.
func podToken(ctx context.Context, t *testing.T, app string) string {
	t.Helper()
	pods, err := node.Cluster.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + app})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("%s pods: %v, %v", app, pods, err)
	}
	files, err := filepath.Glob(filepath.Join(realnode.Root, "kubelet", "pods", string(pods.Items[0].UID), "volumes", "kubernetes.io~projected", "*", "token"))
	if err != nil || len(files) != 1 {
		t.Fatalf("the %s pod's token on the host: %v, %v", app, files, err)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// tokenClient calls the node's API server with token alone.
func tokenClient(t *testing.T, token string) kubernetes.Interface {
	t.Helper()
	cfg := rest.AnonymousClientConfig(node.Cluster.Config)
	cfg.BearerToken = token
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// reconcilerToken mints a token of the reconciler's ServiceAccount for
// nodeName's agent, as the reconciler does.
func reconcilerToken(ctx context.Context, t *testing.T, nodeName string) string {
	t.Helper()
	tr, err := node.Cluster.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, "nodeconfig-reconciler",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"nodeconfig-agent/" + nodeName}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// agentClient dials the agent's gRPC port at the node's address, trusting
// the agents' CA and checking the node's own name, as the reconciler does.
func agentClient(ctx context.Context, t *testing.T) nodeconfigv1.CheckpointServiceClient {
	t.Helper()
	secret, err := node.Cluster.Client.CoreV1().Secrets(namespace).Get(ctx, "nodeconfig-agent-ca", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(secret.Data[corev1.TLSCertKey]) {
		t.Fatal("no CA certificate in the agents' CA Secret")
	}
	creds := credentials.NewTLS(&tls.Config{RootCAs: roots, ServerName: realnode.NodeName + v1alpha1.AgentServingNameSuffix, MinVersion: tls.VersionTLS12})
	conn, err := grpc.NewClient(net.JoinHostPort(realnode.Gateway, "7601"), grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return nodeconfigv1.NewCheckpointServiceClient(conn)
}
