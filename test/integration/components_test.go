package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"nodeconfig.io/test/framework/proc"
)

// The optional components (cert-manager, Prometheus Operator) build into
// an overlay of the install and apply server-side, in the install's
// namespace, once their CRDs exist (written fixtures, see testdata).
func TestOptionalComponentsBuildAndApply(t *testing.T) {
	root, err := proc.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	testdata := filepath.Join(root, "test", "integration", "testdata")
	overlay := filepath.Join(testdata, "components")
	built, err := kubectl(t, "", "kustomize", overlay)
	if err != nil {
		t.Fatalf("kubectl kustomize: %v\n%s", err, built)
	}
	for _, kind := range []string{"Issuer", "Certificate", "PodMonitor", "PrometheusRule", "DaemonSet"} {
		if !strings.Contains(built, "\nkind: "+kind+"\n") {
			t.Errorf("the overlay has no %s", kind)
		}
	}
	// The reconciler runs on control-plane nodes only, unless the
	// component for managed clusters lets it onto workers.
	base, err := kubectl(t, "", "kustomize", filepath.Join(root, "deploy"))
	if err != nil {
		t.Fatalf("kubectl kustomize deploy: %v\n%s", err, base)
	}
	const controlPlane = "key: node-role.kubernetes.io/control-plane"
	if strings.Count(base, controlPlane) != 2 {
		t.Errorf("deploy/ does not hold the reconciler to control-plane nodes (%d mentions, want a toleration and an affinity)", strings.Count(base, controlPlane))
	}
	if strings.Contains(built, controlPlane) {
		t.Error("with reconciler-on-workers the reconciler is still held to control-plane nodes")
	}
	if out, err := kubectl(t, "", "apply", "--server-side", "-f", filepath.Join(testdata, "component-crds.yaml")); err != nil {
		t.Fatalf("fixture CRDs: %v\n%s", err, out)
	}
	for _, crd := range []string{"issuers.cert-manager.io", "certificates.cert-manager.io", "podmonitors.monitoring.coreos.com", "prometheusrules.monitoring.coreos.com"} {
		if out, err := kubectl(t, "", "wait", "--for=condition=Established", "--timeout=30s", "crd/"+crd); err != nil {
			t.Fatalf("CRD %s: %v\n%s", crd, err, out)
		}
	}
	// The namespace first, as in TestDeployInstallsWithLeastPrivilege.
	if out, err := kubectl(t, "", "apply", "--server-side", "-f", filepath.Join(root, "deploy", "namespace.yaml")); err != nil {
		t.Fatalf("namespace: %v\n%s", err, out)
	}
	if out, err := kubectl(t, built, "apply", "--server-side", "--force-conflicts", "--field-manager", "components-test", "-f", "-"); err != nil {
		t.Fatalf("server-side apply: %v\n%s", err, out)
	}
	for _, obj := range []string{"issuer/nodeconfig-selfsigned", "certificate/nodeconfig-agent-ca", "podmonitor/nodeconfig-agent", "podmonitor/nodeconfig-reconciler", "prometheusrule/nodeconfig"} {
		if out, err := kubectl(t, "", "get", "-n", "nodeconfig-system", obj); err != nil {
			t.Errorf("%s not in the install's namespace: %v\n%s", obj, err, out)
		}
	}
	rules, err := kubectl(t, "", "get", "-n", "nodeconfig-system", "prometheusrule/nodeconfig", "-o", "jsonpath={.spec.groups[0].rules[*].alert}")
	if err != nil {
		t.Fatal(err)
	}
	for _, alert := range []string{"NodeConfigRolloutHalted", "NodeConfigNodesRolledBack", "NodeConfigCheckpointdUnreachable", "NodeConfigSoakNeverEnds"} {
		if !strings.Contains(rules, alert) {
			t.Errorf("alert %s missing from the applied rule (%s)", alert, rules)
		}
	}
}

// The overlay docs/install.md gives for another namespace moves every
// subject with the install: nothing is left naming nodeconfig-system.
func TestAnotherNamespaceOverlayFromTheDocs(t *testing.T) {
	root, err := proc.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "<!-- namespace-overlay:begin -->\n```yaml\n")
	block, _, ok2 := strings.Cut(block, "```\n<!-- namespace-overlay:end -->")
	if !ok || !ok2 {
		t.Fatal("docs/install.md has no namespace-overlay block")
	}
	// kustomize takes only relative paths: the overlay sits next to deploy/.
	dir, err := os.MkdirTemp(root, ".namespace-overlay-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(block), 0o644); err != nil {
		t.Fatal(err)
	}
	built, err := kubectl(t, "", "kustomize", dir)
	if err != nil {
		t.Fatalf("kubectl kustomize: %v\n%s", err, built)
	}
	if n := strings.Count(built, "nodeconfig-system"); n != 0 {
		t.Errorf("the overlay leaves %d mentions of nodeconfig-system:\n%s", n, built)
	}
	if n := strings.Count(built, "namespace: team-infra"); n < 10 {
		t.Errorf("only %d objects or subjects in team-infra", n)
	}
}
