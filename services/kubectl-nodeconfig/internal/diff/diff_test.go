package diff

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/kubectl-nodeconfig/internal/report"
)

const base = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 250\nserializeImagePulls: true\n"

func preview(p *nodeconfigv1.PreviewConfigResponse) *nodeconfigv1.PreviewNodeResponse {
	return &nodeconfigv1.PreviewNodeResponse{
		NodeConfig: "demo",
		Source:     &nodeconfigv1.ConfigSource{Namespace: "ns", Name: "cm", Uid: "u", ResourceVersion: "12", Key: "config.yaml"},
		Payload:    []byte("serializeImagePulls: false\n"),
		Preview:    p,
	}
}

func TestDiffFromCurrentToCandidate(t *testing.T) {
	r, err := Build("node-1", preview(&nodeconfigv1.PreviewConfigResponse{
		Files:     []string{"/etc/kubernetes/kubelet.yaml", "/etc/kubernetes/kubelet.conf.d/50-nodeconfig.conf"},
		Current:   base,
		Candidate: strings.Replace(base, "serializeImagePulls: true", "serializeImagePulls: false", 1),
		Merged:    true,
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := `--- node-1 now: /etc/kubernetes/kubelet.yaml + /etc/kubernetes/kubelet.conf.d/50-nodeconfig.conf
+++ node-1 with the drop-in: /etc/kubernetes/kubelet.yaml + /etc/kubernetes/kubelet.conf.d/50-nodeconfig.conf
@@ -1,4 +1,4 @@
 apiVersion: kubelet.config.k8s.io/v1beta1
 kind: KubeletConfiguration
 maxPods: 250
-serializeImagePulls: true
+serializeImagePulls: false
`
	if r.Diff != want {
		t.Fatalf("diff:\n%s\nwant:\n%s", r.Diff, want)
	}
	var b bytes.Buffer
	if err := Text(&b, r); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Logf("\n%s", out)
	for _, w := range []string{
		"NodeConfig demo wants ConfigMap ns/cm key config.yaml at resourceVersion 12 for node-1.\n",
		"\nThe drop-in:\n  serializeImagePulls: false\n",
		"\nThe node merges, in order: /etc/kubernetes/kubelet.yaml, /etc/kubernetes/kubelet.conf.d/50-nodeconfig.conf.\n",
		"\nIts effective config would change:\n" + want,
	} {
		if !strings.Contains(out, w) {
			t.Errorf("missing %q", w)
		}
	}
	if strings.Contains(out, "Note:") {
		t.Error("a merged preview is noted as not merged")
	}
}

func TestRefusedAndUnmergedAndUnchanged(t *testing.T) {
	r, err := Build("node-0", preview(&nodeconfigv1.PreviewConfigResponse{Files: []string{"/etc/kubelet.yaml"}, Current: base,
		Refused: "strict decoding error: unknown field \"maxPodz\"", Merged: true}))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	_ = Text(&b, r)
	if r.Diff != "" || !strings.Contains(b.String(), "\nThe node would refuse it: strict decoding error: unknown field \"maxPodz\"\n") {
		t.Errorf("refused:\n%s", b.String())
	}

	r, _ = Build("node-0", preview(&nodeconfigv1.PreviewConfigResponse{Current: "a: 1", Candidate: "a: 2"}))
	b.Reset()
	_ = Text(&b, r)
	if !strings.Contains(b.String(), "Note: the node knows no way to merge") || !strings.Contains(r.Diff, "-a: 1\n+a: 2\n") ||
		!strings.Contains(r.Diff, "--- node-0 now: the node's file\n") {
		t.Errorf("unmerged:\n%s", b.String())
	}

	r, _ = Build("node-0", preview(&nodeconfigv1.PreviewConfigResponse{Current: base, Candidate: base, Merged: true}))
	b.Reset()
	_ = Text(&b, r)
	if r.Diff != "" || !strings.Contains(b.String(), "\nNo change: node-0 already runs this effective config (-o json shows it).\n") {
		t.Errorf("unchanged:\n%s", b.String())
	}
}

func TestLocalDefaultAndNoNodeConfig(t *testing.T) {
	r, _ := Build("node-0", &nodeconfigv1.PreviewNodeResponse{NodeConfig: "demo", Preview: &nodeconfigv1.PreviewConfigResponse{Current: base, Candidate: "", Merged: true}})
	var b bytes.Buffer
	_ = Text(&b, r)
	if r.Source != nil || !strings.Contains(b.String(), "NodeConfig demo wants the local default for node-0: no drop-in.") || strings.Contains(b.String(), "The drop-in:") {
		t.Errorf("local default:\n%s", b.String())
	}
	r, _ = Build("node-0", &nodeconfigv1.PreviewNodeResponse{Preview: &nodeconfigv1.PreviewConfigResponse{Merged: true}})
	b.Reset()
	_ = Text(&b, r)
	if !strings.Contains(b.String(), "No NodeConfig selects node-0: it would return to its local default.") {
		t.Errorf("no NodeConfig:\n%s", b.String())
	}
}

func TestJSONFieldNames(t *testing.T) {
	r, _ := Build("node-1", preview(&nodeconfigv1.PreviewConfigResponse{Files: []string{"f"}, Current: "a", Candidate: "b", Merged: true}))
	var b bytes.Buffer
	if err := report.JSON(&b, r); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range doc {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if want := []string{"candidate", "current", "diff", "files", "merged", "node", "nodeConfig", "payload", "refused", "source"}; !slices.Equal(keys, want) {
		t.Errorf("keys %v, want %v", keys, want)
	}
}
