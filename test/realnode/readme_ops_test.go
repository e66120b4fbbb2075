package realnode_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/realnode"
)

// readmeSection returns the shell lines of the README section titled
// heading, in order, with NODE replaced by this node's name.
func readmeSection(t *testing.T, heading string) []string {
	t.Helper()
	lines, err := realnode.ReadmeCommands(heading)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) == 0 {
		t.Fatalf("README section %q has no commands", heading)
	}
	for i, line := range lines {
		lines[i] = strings.ReplaceAll(line, "NODE", realnode.NodeName)
	}
	return lines
}

// readmeStatusAndIncident runs the README's "What the statuses mean" and "In
// an incident" commands as written, the plugin reaching the reconciler the
// default way (a port-forward to the pod holding the Lease), and checks each
// against the API server and the kubelet: pause and undo land in the
// NodeConfig, the diff previews the undo's file, and after resume the kubelet
// runs the previous revision. It expects the rollout to have promoted
// maxPods 64 and then 65, as restartOnlyWhenNeeded leaves it.
func readmeStatusAndIncident(ctx context.Context, t *testing.T, work string) {
	bin, err := proc.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	run := func(line string) string {
		t.Helper()
		out, err := node.Shell(ctx, work, "PATH="+bin+":$PATH "+line)
		if err != nil {
			t.Fatalf("%v\n%s", err, diagnose(ctx))
		}
		t.Logf("$ %s\n%s", line, out)
		return string(out)
	}
	want := func(line, out string, subs ...string) {
		t.Helper()
		for _, s := range subs {
			if !strings.Contains(out, s) {
				t.Errorf("%s: output lacks %q:\n%s", line, s, out)
			}
		}
		if strings.Contains(out, "not reachable") {
			t.Errorf("%s: the plugin did not reach the reconciler through its port-forward:\n%s", line, out)
		}
	}
	for _, line := range readmeSection(t, "What the statuses mean") {
		out := run(line)
		switch {
		case strings.HasPrefix(line, "kubectl get nodeconfigs"):
			want(line, out, "workers")
		case strings.HasPrefix(line, "kubectl nodeconfig status"):
			want(line, out, "workers", realnode.NodeName)
		case strings.HasPrefix(line, "kubectl nodeconfig why"):
			want(line, out, realnode.NodeName+" is selected by NodeConfig workers")
		case strings.HasPrefix(line, "kubectl get events"):
			// The earlier scenarios' rollbacks, told by the node's agent.
			want(line, out, realnode.NodeName, "ConsumerUnhealthy")
		default:
			t.Errorf("a README command this test does not check: %s", line)
		}
	}
	// The NodeConfig as the API server stores it.
	nodeConfig := func() (paused bool, revision string) {
		t.Helper()
		out, err := node.Shell(ctx, work, `kubectl get nodeconfig workers -o jsonpath='{.spec.rollout.paused}/{.spec.source.revision}'`)
		if err != nil {
			t.Fatal(err)
		}
		p, r, _ := strings.Cut(strings.TrimSpace(string(out)), "/")
		return p == "true", r
	}
	for _, line := range readmeSection(t, "In an incident") {
		out := run(line)
		switch {
		case strings.HasPrefix(line, "kubectl nodeconfig pause"):
			if paused, _ := nodeConfig(); !paused {
				t.Errorf("%s: the NodeConfig is not paused", line)
			}
		case strings.HasPrefix(line, "kubectl nodeconfig history"):
			want(line, out, "REVISION", "(current)")
		case strings.HasPrefix(line, "kubectl nodeconfig undo"):
			if _, revision := nodeConfig(); revision == "" {
				t.Errorf("%s: spec.source.revision is not set", line)
			}
			if content, err := os.ReadFile(filepath.Join(realnode.ConfigDir, dropIn)); err != nil || !strings.Contains(string(content), "maxPods: 65") {
				t.Errorf("paused, the undo changed the drop-in already: %q, %v", content, err)
			}
		case strings.HasPrefix(line, "kubectl nodeconfig diff"):
			want(line, out, "maxPods: 64", "-maxPods: 65", "+maxPods: 64")
		case strings.HasPrefix(line, "kubectl nodeconfig resume"):
			if paused, _ := nodeConfig(); paused {
				t.Errorf("%s: the NodeConfig is still paused", line)
			}
		default:
			t.Errorf("a README command this test does not check: %s", line)
		}
	}
	waitFile(t, filepath.Join(realnode.ConfigDir, dropIn), "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 64\n")
	waitKubeletHealthyOn(ctx, t, 64)
}
