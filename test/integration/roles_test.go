package integration

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"nodeconfig.io/services/api/client/clientset"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/test/framework/cluster"
	"nodeconfig.io/test/framework/proc"
)

// The roles deploy/ ships for people: a pauser may pause and resume a
// rollout and change nothing else of it; an editor may change it; a viewer
// may only read. Checked through the real API server, RBAC and the
// admission policy together.
func TestThePauserMayOnlyPauseAndResume(t *testing.T) {
	root, _ := proc.RepoRoot()
	if out, err := kubectl(t, "", "apply", "-k", filepath.Join(root, "deploy")); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	ctx := context.Background()
	admin := nodeConfigClient(t, "")
	nc := &v1alpha1.NodeConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "roles-nc"},
		Spec: v1alpha1.NodeConfigSpec{
			NodeSelector: &v1alpha1.LabelSelector{MatchLabels: map[string]string{"pool": "roles"}},
			Source:       &v1alpha1.Source{ConfigMap: &v1alpha1.ConfigMapSource{Namespace: "default", Name: "cfg", Key: "config.yaml"}},
		},
	}
	if _, err := admin.NodeConfigV1alpha1().NodeConfigs().Create(ctx, nc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.NodeConfigV1alpha1().NodeConfigs().Delete(context.Background(), nc.Name, metav1.DeleteOptions{})
	})
	for user, role := range map[string]string{"pat": "nodeconfig-pauser", "eve": "nodeconfig-editor", "val": "nodeconfig-viewer"} {
		bindClusterRole(t, user, role)
	}
	pat, eve, val := nodeConfigClient(t, "pat"), nodeConfigClient(t, "eve"), nodeConfigClient(t, "val")
	patch := func(c clientset.Interface, p string) error {
		_, err := c.NodeConfigV1alpha1().NodeConfigs().Patch(ctx, nc.Name, types.MergePatchType, []byte(p), metav1.PatchOptions{})
		return err
	}
	// The policy and the bindings may take a moment to be loaded.
	if err := proc.WaitFor(20*time.Second, func() (bool, error) {
		err := patch(pat, `{"spec":{"source":{"configMap":{"name":"attacker"}}}}`)
		return err != nil && strings.Contains(err.Error(), "may only pause or resume it"), err
	}); err != nil {
		t.Fatalf("the pauser changed the source: %v", err)
	}
	if err := patch(pat, `{"spec":{"rollout":{"paused":true}}}`); err != nil {
		t.Fatalf("the pauser could not pause: %v", err)
	}
	if err := patch(pat, `{"spec":{"rollout":{"paused":false}}}`); err != nil {
		t.Fatalf("the pauser could not resume: %v", err)
	}
	for what, p := range map[string]string{
		"the validator":    `{"spec":{"validator":"json"}}`,
		"the selector":     `{"spec":{"nodeSelector":{"matchLabels":{"pool":"all"}}}}`,
		"the soak":         `{"spec":{"soakSeconds":1}}`,
		"maxInTrial":       `{"spec":{"rollout":{"maxInTrial":"100%"}}}`,
		"maxFailures":      `{"spec":{"rollout":{"maxFailures":0}}}`,
		"the windows":      `{"spec":{"rollout":{"windows":[{"start":"00:00","end":"01:00"}]}}}`,
		"the revision":     `{"spec":{"source":{"revision":1}}}`,
		"a label":          `{"metadata":{"labels":{"x":"y"}}}`,
		"an annotation":    `{"metadata":{"annotations":{"x":"y"}}}`,
		"a finalizer":      `{"metadata":{"finalizers":["example.com/hold"]}}`,
		"pause and source": `{"spec":{"rollout":{"paused":true},"source":null}}`,
	} {
		if err := patch(pat, p); err == nil || !strings.Contains(err.Error(), "may only pause or resume it") {
			t.Errorf("the pauser changed %s: %v", what, err)
		}
	}
	got, err := admin.NodeConfigV1alpha1().NodeConfigs().Get(ctx, nc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.Source == nil || got.Spec.Source.ConfigMap.Name != "cfg" || got.Spec.Rollout.Paused || len(got.Labels) != 0 {
		t.Fatalf("after the pauser's attempts the NodeConfig is %+v", got)
	}

	if err := patch(eve, `{"spec":{"source":{"configMap":{"name":"cfg2"}},"soakSeconds":60}}`); err != nil {
		t.Fatalf("the editor could not change the source: %v", err)
	}
	if _, err := val.NodeConfigV1alpha1().NodeConfigs().Get(ctx, nc.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("the viewer could not read: %v", err)
	}
	if err := patch(val, `{"spec":{"rollout":{"paused":true}}}`); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("the viewer paused: %v", err)
	}
	if err := pat.NodeConfigV1alpha1().NodeConfigs().Delete(ctx, nc.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); err == nil {
		t.Fatal("the pauser may delete a NodeConfig")
	}
}

// bindClusterRole gives user role, cluster-wide, until the test ends.
func bindClusterRole(t *testing.T, user, role string) {
	t.Helper()
	name := "test-" + user + "-" + role
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}},
	}
	if _, err := cluster.Shared.Client.RbacV1().ClusterRoleBindings().Create(context.Background(), crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Shared.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// nodeConfigClient acts as user ("" for the admin).
func nodeConfigClient(t *testing.T, user string) clientset.Interface {
	t.Helper()
	cfg := rest.CopyConfig(cluster.Shared.Config)
	if user != "" {
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	}
	c, err := clientset.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
