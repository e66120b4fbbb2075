package integration

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/test/framework/cluster"
	"nodeconfig.io/test/framework/proc"
)

// deploy/ is accepted by server-side validation, installs, and gives each
// ServiceAccount exactly what it needs.
func TestDeployInstallsWithLeastPrivilege(t *testing.T) {
	root, err := proc.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "deploy")
	// A server-side dry run cannot create objects in a namespace that does
	// not exist yet; the namespace first, as 'kubectl apply -k' orders it.
	if out, err := kubectl(t, "", "apply", "-f", filepath.Join(dir, "namespace.yaml")); err != nil {
		t.Fatalf("namespace: %v\n%s", err, out)
	}
	if out, err := kubectl(t, "", "apply", "--dry-run=server", "-k", dir); err != nil {
		t.Fatalf("server-side dry run: %v\n%s", err, out)
	}
	if out, err := kubectl(t, "", "apply", "-k", dir); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	const (
		agent      = "system:serviceaccount:nodeconfig-system:nodeconfig-agent"
		status     = "system:serviceaccount:nodeconfig-system:nodeconfig-status"
		reconciler = "system:serviceaccount:nodeconfig-system:nodeconfig-reconciler"
	)
	for _, tc := range []struct {
		as    string
		args  string
		allow bool
	}{
		// checkpointd: its health gate reads its Node and its node's pods;
		// it asks for its serving certificate and reviews its callers; a
		// drain cordons its Node and evicts its pods. It writes no Node
		// status and no Event: statusd does.
		{agent, "get nodes", true},
		{agent, "watch nodes", true},
		{agent, "patch nodes", true}, // spec.unschedulable of its own, held by nodeconfig-agent-own-node
		{agent, "patch nodes --subresource=status", false},
		{agent, "create pods --subresource=eviction -n default", true}, // a drain
		{agent, "delete pods -n default", false},
		{agent, "get validatingadmissionpolicies/nodeconfig-agent-own-node", true},
		{agent, "get validatingadmissionpolicybindings/nodeconfig-agent-own-node", true},
		{agent, "update validatingadmissionpolicies/nodeconfig-agent-own-node", false},
		{status, "get validatingadmissionpolicies/nodeconfig-agent-own-node", false},
		{agent, "delete nodes", false},
		{agent, "create nodes", false},
		{agent, "get secrets -A", false},
		{agent, "list configmaps -A", false},
		{agent, "update nodeconfigs.nodeconfig.io", false},
		{agent, "create pods -n nodeconfig-system", false},
		{agent, "create events", false},
		{agent, "list pods -A", true}, // the health gate asks for its own node's
		{agent, "get validatingadmissionpolicies/nodeconfig-status-own-events", false},
		{agent, "create tokenreviews.authentication.k8s.io", true},
		{agent, "create serviceaccounts/token -n nodeconfig-system", false},
		{agent, "get validatingadmissionpolicies/nodeconfig-status-own-node", false},
		{agent, "get validatingadmissionpolicies/nodeconfig-configure", false},
		{agent, "create certificatesigningrequests.certificates.k8s.io", true},
		{agent, "watch certificatesigningrequests.certificates.k8s.io", true},
		{agent, "update certificatesigningrequests.certificates.k8s.io --subresource=approval", false},
		{agent, "update certificatesigningrequests.certificates.k8s.io --subresource=status", false},
		// statusd: its Node's status and Events about it, and the check
		// that the policies holding it to its own are in force.
		{status, "get nodes", true},
		{status, "watch nodes", true},
		{status, "patch nodes", false},
		{status, "patch nodes --subresource=status", true},
		{status, "delete nodes", false},
		{status, "create nodes", false},
		{status, "get secrets -A", false},
		{status, "list configmaps -A", false},
		{status, "update nodeconfigs.nodeconfig.io", false},
		{status, "configure nodeconfigs.nodeconfig.io", false},
		{status, "create events", true}, // held to its own Node by nodeconfig-status-own-events
		{status, "patch events", false},
		{status, "list pods -A", false},
		{status, "create pods -n nodeconfig-system", false},
		{status, "get validatingadmissionpolicies/nodeconfig-status-own-events", true},
		{status, "get validatingadmissionpolicies/nodeconfig-status-own-node", true},
		{status, "get validatingadmissionpolicybindings/nodeconfig-status-own-node", true},
		{status, "get validatingadmissionpolicies/nodeconfig-configure", false},
		{status, "update validatingadmissionpolicies/nodeconfig-status-own-node", false},
		{status, "create tokenreviews.authentication.k8s.io", false},
		{status, "create subjectaccessreviews.authorization.k8s.io", false},
		{status, "create serviceaccounts/token -n nodeconfig-system", false},
		{status, "create certificatesigningrequests.certificates.k8s.io", false},
		{status, "list controllerrevisions.apps -n nodeconfig-system", false},
		{status, "*", false},
		{reconciler, "list nodeconfigs.nodeconfig.io", true},
		{reconciler, "watch nodeconfigs.nodeconfig.io", true},
		{reconciler, "update nodeconfigs.nodeconfig.io --subresource=status", true},
		{reconciler, "patch nodeconfigs.nodeconfig.io", true},
		{reconciler, "configure nodeconfigs.nodeconfig.io", true},
		{agent, "configure nodeconfigs.nodeconfig.io", false},
		{reconciler, "delete nodeconfigs.nodeconfig.io", false},
		{reconciler, "create nodeconfigs.nodeconfig.io", false},
		{reconciler, "list configmaps -A", false},
		{reconciler, "watch configmaps -n nodeconfig-system", true},
		{reconciler, "get configmaps -n default", false},
		{reconciler, "create configmaps -n default", false},
		{reconciler, "update configmaps -n default", false},
		{reconciler, "list nodes", true},
		{reconciler, "patch nodes", true},
		{reconciler, "delete nodes", false},
		{reconciler, "patch nodes --subresource=status", false},
		{reconciler, "list pods -n nodeconfig-system", true},
		{reconciler, "list pods -n default", false},
		{reconciler, "create leases.coordination.k8s.io -n nodeconfig-system", true},
		{reconciler, "create leases.coordination.k8s.io -n kube-system", false},
		{reconciler, "create events -n default", true},
		{reconciler, "create serviceaccounts/nodeconfig-reconciler --subresource=token -n nodeconfig-system", true},
		{reconciler, "create serviceaccounts/nodeconfig-agent --subresource=token -n nodeconfig-system", false},
		{reconciler, "create serviceaccounts/nodeconfig-status --subresource=token -n nodeconfig-system", false},
		{reconciler, "create serviceaccounts/default --subresource=token -n kube-system", false},
		{reconciler, "get secrets -A", false},
		{reconciler, "get validatingadmissionpolicies/nodeconfig-reconciler-abandon-mark", true},
		{reconciler, "get validatingadmissionpolicybindings/nodeconfig-reconciler-abandon-mark", true},
		{reconciler, "delete validatingadmissionpolicybindings/nodeconfig-reconciler-abandon-mark", false},
		{reconciler, "watch certificatesigningrequests.certificates.k8s.io", true},
		{reconciler, "create certificatesigningrequests.certificates.k8s.io", false},
		{reconciler, "delete certificatesigningrequests.certificates.k8s.io", false},
		{reconciler, "update certificatesigningrequests.certificates.k8s.io --subresource=approval", true},
		{reconciler, "update certificatesigningrequests.certificates.k8s.io --subresource=status", true},
		{reconciler, "create pods -n nodeconfig-system", false},
		{reconciler, "create controllerrevisions.apps -n nodeconfig-system", true},
		{reconciler, "patch controllerrevisions.apps -n nodeconfig-system", true},
		{reconciler, "delete controllerrevisions.apps -n nodeconfig-system", true},
		{reconciler, "watch controllerrevisions.apps -n nodeconfig-system", true},
		{reconciler, "update controllerrevisions.apps -n nodeconfig-system", false},
		{reconciler, "create controllerrevisions.apps -n default", false},
		{reconciler, "list controllerrevisions.apps -A", false},
		{agent, "list controllerrevisions.apps -n nodeconfig-system", false},
		{reconciler, "*", false},
	} {
		args := append([]string{"auth", "can-i", "--as=" + tc.as}, strings.Fields(tc.args)...)
		if tc.args == "*" {
			args = []string{"auth", "can-i", "--as=" + tc.as, "*", "*"}
		}
		out, _ := kubectl(t, "", args...)
		// The answer is the last line; warnings about cluster scope come first.
		lines := strings.Split(strings.TrimSpace(out), "\n")
		got := strings.TrimSpace(lines[len(lines)-1]) == "yes"
		if got != tc.allow {
			who := tc.as[strings.LastIndex(tc.as, ":")+1:]
			t.Errorf("%s can-i %s = %q, want allowed=%v", who, tc.args, strings.TrimSpace(out), tc.allow)
		}
	}
	// Signers are no resource kubectl can name: ask the API server as it
	// asks itself when a request is approved or signed.
	for _, tc := range []struct {
		as, verb, signer string
		allow            bool
	}{
		{reconciler, "approve", "nodeconfig.io/agent-serving", true},
		{reconciler, "sign", "nodeconfig.io/agent-serving", true},
		{reconciler, "approve", "kubernetes.io/kube-apiserver-client", false},
		{reconciler, "sign", "kubernetes.io/kubelet-serving", false},
		{agent, "approve", "nodeconfig.io/agent-serving", false},
		{agent, "sign", "nodeconfig.io/agent-serving", false},
		{status, "approve", "nodeconfig.io/agent-serving", false},
	} {
		sar, err := cluster.Shared.Client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: tc.as, Groups: []string{"system:serviceaccounts", "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Group: "certificates.k8s.io", Resource: "signers", Name: tc.signer, Verb: tc.verb}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed != tc.allow {
			t.Errorf("%s may %s for signer %s: %v, want %v", tc.as, tc.verb, tc.signer, sar.Status.Allowed, tc.allow)
		}
	}
}

// The admission policies in deploy/ let statusd write only the Node its
// token is bound to (RBAC alone cannot say "its own"); checkpointd's token,
// bound to the same Node, writes only that Node's spec.unschedulable.
func TestStatusdMayOnlyWriteItsOwnNode(t *testing.T) {
	root, _ := proc.RepoRoot()
	if out, err := kubectl(t, "", "apply", "-k", filepath.Join(root, "deploy")); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	ctx := context.Background()
	for _, name := range []string{"own-node", "other-node"} {
		if _, err := cluster.Shared.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cluster.Shared.Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	statusd := impersonate(t, "system:serviceaccount:nodeconfig-system:nodeconfig-status", "own-node")
	// statusd's own kind of patch: condition and annotation through status.
	patch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.NodeAnnotationConfigStatus + `":"{}"}},"status":{"conditions":[{"type":"NodeConfigReady","status":"True","reason":"LocalDefault","message":"m"}]}}`)
	// The policy may take a moment to be loaded by the API server.
	err := proc.WaitFor(20*time.Second, func() (bool, error) {
		_, err := statusd.CoreV1().Nodes().Patch(ctx, "other-node", types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
		return err != nil && strings.Contains(err.Error(), "only write the Node it runs on"), err
	})
	if err != nil {
		t.Fatalf("statusd wrote another node: %v", err)
	}
	updated, err := statusd.CoreV1().Nodes().Patch(ctx, "own-node", types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		t.Fatalf("statusd could not write its own node: %v", err)
	}
	if updated.Annotations[v1alpha1.NodeAnnotationConfigStatus] != "{}" {
		t.Fatal("the status subresource dropped the annotation")
	}
	if _, err := statusd.CoreV1().Nodes().Patch(ctx, "own-node", types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err == nil {
		t.Fatal("statusd patched a Node spec")
	}
	// Of its own Node, only its condition and its annotation.
	refusedOwn(t, statusd, "own-node")

	// checkpointd, root on the node, may not write its Node's status nor
	// its metadata; of it, only spec.unschedulable: a drain's cordon.
	checkpointd := impersonate(t, "system:serviceaccount:nodeconfig-system:nodeconfig-agent", "own-node")
	if _, err := checkpointd.CoreV1().Nodes().Patch(ctx, "own-node", types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); !apierrors.IsForbidden(err) {
		t.Fatalf("checkpointd's own condition and annotation: %v, want Forbidden", err)
	}
	cordon := []byte(`{"spec":{"unschedulable":true}}`)
	if _, err := checkpointd.CoreV1().Nodes().Patch(ctx, "other-node", types.MergePatchType, cordon, metav1.PatchOptions{}); err == nil || !strings.Contains(err.Error(), "only write the Node it runs on") {
		t.Fatalf("checkpointd cordoned another node: %v", err)
	}
	if n, err := checkpointd.CoreV1().Nodes().Patch(ctx, "own-node", types.MergePatchType, cordon, metav1.PatchOptions{}); err != nil || !n.Spec.Unschedulable {
		t.Fatalf("checkpointd could not cordon its own node: %v", err)
	}
	if _, err := checkpointd.CoreV1().Nodes().Patch(ctx, "own-node", types.MergePatchType, []byte(`{"spec":{"unschedulable":false}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("checkpointd could not uncordon its own node: %v", err)
	}
	for what, p := range map[string]string{
		"a taint":       `{"spec":{"taints":[{"key":"example.com/evil","effect":"NoSchedule"}]}}`,
		"its podCIDR":   `{"spec":{"podCIDR":"10.9.0.0/24"}}`,
		"its provider":  `{"spec":{"providerID":"aws:///us-east-1a/i-0"}}`,
		"a label":       `{"metadata":{"labels":{"x":"y"}}}`,
		"an annotation": `{"metadata":{"annotations":{"` + v1alpha1.NodeAnnotationConfigStatus + `":"forged"}}}`,
		"a finalizer":   `{"metadata":{"finalizers":["example.com/hold"]}}`,
	} {
		if _, err := checkpointd.CoreV1().Nodes().Patch(ctx, "own-node", types.MergePatchType, []byte(p), metav1.PatchOptions{}); err == nil || !strings.Contains(err.Error(), "nodeconfig agent may") {
			t.Errorf("checkpointd changed %s of its own Node: %v", what, err)
		}
	}

	// The policy does not depend on the namespace the install is in:
	// statusd's ServiceAccount of another namespace, given the same rights,
	// is held to the same rules.
	if _, err := cluster.Shared.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "nodeconfig-status-elsewhere"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "nodeconfig-status"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "nodeconfig-status", Namespace: "nodeconfig-elsewhere"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Shared.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), "nodeconfig-status-elsewhere", metav1.DeleteOptions{})
	})
	elsewhere := impersonate(t, "system:serviceaccount:nodeconfig-elsewhere:nodeconfig-status", "own-node")
	if err := proc.WaitFor(20*time.Second, func() (bool, error) {
		_, err := elsewhere.CoreV1().Nodes().Patch(ctx, "own-node", types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
		return err == nil, nil
	}); err != nil {
		t.Fatalf("a statusd installed elsewhere could not write its own condition: %v", err)
	}
	if _, err := elsewhere.CoreV1().Nodes().Patch(ctx, "other-node", types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err == nil {
		t.Fatal("a statusd installed in another namespace wrote another node")
	}
	refusedOwn(t, elsewhere, "own-node")

	// The reconciler patches only its abandon mark.
	reconciler := impersonate(t, "system:serviceaccount:nodeconfig-system:nodeconfig-reconciler", "")
	if _, err := reconciler.CoreV1().Nodes().Patch(ctx, "own-node", types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+v1alpha1.AnnotationAbandoned+`":"nc"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("the reconciler could not set its abandon mark: %v", err)
	}
	for what, p := range map[string]string{
		"a label":            `{"metadata":{"labels":{"x":"y"}}}`,
		"another annotation": `{"metadata":{"annotations":{"other":"v"}}}`,
		"the spec":           `{"spec":{"unschedulable":true}}`,
		"an owner reference": `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"gone","uid":"00000000-0000-0000-0000-000000000001"}]}}`,
		"a finalizer":        `{"metadata":{"finalizers":["example.com/hold"]}}`,
	} {
		_, err := reconciler.CoreV1().Nodes().Patch(ctx, "own-node", types.MergePatchType, []byte(p), metav1.PatchOptions{})
		if err == nil || !strings.Contains(err.Error(), "may change only") {
			t.Errorf("the reconciler changed %s of a Node: %v", what, err)
		}
	}
}

// impersonate is a client acting as user, with a token bound to node
// (if any), as the API server sees a projected ServiceAccount token.
func impersonate(t *testing.T, user, node string) kubernetes.Interface {
	t.Helper()
	parts := strings.Split(user, ":")
	cfg := rest.CopyConfig(cluster.Shared.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: user,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + parts[2], "system:authenticated"},
	}
	if node != "" {
		cfg.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {node}}
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// refusedOwn checks that statusd cannot change anything of its own Node
// but its condition and its annotation, through the status subresource.
func refusedOwn(t *testing.T, statusd kubernetes.Interface, node string) {
	t.Helper()
	for what, p := range map[string]string{
		"a label":            `{"metadata":{"labels":{"x":"y"}}}`,
		"another annotation": `{"metadata":{"annotations":{"other":"v"}}}`,
		"another condition":  `{"status":{"conditions":[{"type":"Ready","status":"False","reason":"X","message":"m"}]}}`,
		"capacity":           `{"status":{"capacity":{"pods":"999"}}}`,
		"addresses":          `{"status":{"addresses":[{"type":"InternalIP","address":"10.9.9.9"}]}}`,
		"volumes in use":     `{"status":{"volumesInUse":["kubernetes.io/csi/attacker^vol"]}}`,
		"images":             `{"status":{"images":[{"names":["registry.example/evil:latest"],"sizeBytes":1}]}}`,
		// A dangling owner makes the garbage collector delete the Node
		// (which registers again without its taints); a finalizer holds it.
		"an owner reference": `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"gone","uid":"00000000-0000-0000-0000-000000000001"}]}}`,
		"a finalizer":        `{"metadata":{"finalizers":["example.com/hold"]}}`,
	} {
		_, err := statusd.CoreV1().Nodes().Patch(context.Background(), node, types.StrategicMergePatchType, []byte(p), metav1.PatchOptions{}, "status")
		if err == nil || !strings.Contains(err.Error(), "may") {
			t.Errorf("statusd changed %s of its own Node: %v", what, err)
		}
	}
}
