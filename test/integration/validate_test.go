package integration

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nodeconfig.io/test/framework/proc"
)

// The bad config 'make run' suggests (hairpinMode: bogus), in the demo's
// NodeConfig and ConfigMap: the built plugin's validate refuses it with the
// kubelet's own words (bin/nodeconfig-kubelet-check, next to it as make
// build puts them) and exits 1; the good one passes. No cluster is used.
func TestValidateTheBadExampleOffline(t *testing.T) {
	plugin, err := proc.Binary("kubectl-nodeconfig")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := proc.Binary("nodeconfig-kubelet-check"); err != nil {
		t.Fatal(err)
	}
	file := func(payload string) string {
		p := filepath.Join(t.TempDir(), "demo.yaml")
		doc := `apiVersion: nodeconfig.io/v1alpha1
kind: NodeConfig
metadata: {name: demo}
spec:
  nodeSelector: {matchLabels: {nodeconfig.io/demo: "true"}}
  validator: kubelet
  source: {configMap: {namespace: nodeconfig-demo, name: kubelet-config, key: config.yaml}}
---
apiVersion: v1
kind: ConfigMap
metadata: {namespace: nodeconfig-demo, name: kubelet-config}
data:
  config.yaml: "` + strings.ReplaceAll(payload, "\n", `\n`) + `"
`
		if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	run := func(path string) (string, int) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, plugin, "validate", "-f", path)
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case err == nil:
			return out.String(), 0
		case errors.As(err, &exit):
			return out.String(), exit.ExitCode()
		}
		t.Fatalf("validate: %v", err)
		return "", 0
	}
	bad := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nhairpinMode: bogus\n"
	out, code := run(file(bad))
	if code != 1 || !strings.Contains(out, "NodeConfig demo (") || !strings.Contains(out, `refused: invalid KubeletConfiguration: invalid configuration: option "bogus" specified for hairpinMode (--hairpin-mode)`) {
		t.Errorf("validate of the bad example: exit %d, want 1 with the kubelet's words:\n%s", code, out)
	}
	good := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 110\nserializeImagePulls: false\n"
	if out, code := run(file(good)); code != 0 || !strings.Contains(out, "1 passed, 0 refused, 0 unjudged") {
		t.Errorf("validate of the demo's config: exit %d, want 0:\n%s", code, out)
	}
}
