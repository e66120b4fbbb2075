package cli

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// kubeconfig points at an API server nothing listens on: the commands
// tested here must not need it.
func kubeconfig(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	err := os.WriteFile(p, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func run(args ...string) (string, string, int) {
	var stdout, stderr bytes.Buffer
	code := Main(args, &stdout, &stderr)
	return stdout.String(), stderr.String(), code
}

func TestOutputFormatIsChecked(t *testing.T) {
	_, stderr, code := run("status", "-o", "xml", "--kubeconfig", kubeconfig(t))
	if code == 0 || !strings.Contains(stderr, `-o "xml": want one of text, wide, json, yaml`) {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	// -o wide is status's alone.
	_, stderr, code = run("why", "node-0", "-o", "wide", "--kubeconfig", kubeconfig(t))
	if code == 0 || !strings.Contains(stderr, `-o "wide": want one of text, json, yaml`) {
		t.Fatalf("why -o wide: exit %d, stderr %q", code, stderr)
	}
}

func TestDiffNeedsTheReconciler(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := lis.Addr().String()
	lis.Close()
	_, stderr, code := run("diff", "node-0", "--kubeconfig", kubeconfig(t), "--reconciler", closed)
	if code == 0 || !strings.Contains(stderr, "error: diff needs the reconciler, which is not reachable: "+closed+": Unavailable") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

func TestDiffSaysWhenTheReconcilerPredatesPreviewNode(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	nodeconfigv1.RegisterReconcilerServiceServer(s, &nodeconfigv1.UnimplementedReconcilerServiceServer{})
	go func() { _ = s.Serve(lis) }()
	defer s.Stop()
	_, stderr, code := run("diff", "node-0", "--kubeconfig", kubeconfig(t), "--reconciler", lis.Addr().String())
	if code == 0 || !strings.Contains(stderr, "does not implement PreviewNode") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

func TestHelpListsTheJSONFields(t *testing.T) {
	for _, c := range []struct {
		cmd    string
		fields []string
	}{
		{"status", []string{"reconciler:", "nodeConfigs:", "counts:", "reconcilerState", "soakEnds", "lastKnownGood"}},
		{"why", []string{"selectedBy", "reconcilerNode:", "rolledBackVersions", "warnings:", "sentences:"}},
		{"diff", []string{"payload:", "files:", "merged:", "current, candidate", "refused:", "diff:"}},
		{"pause", []string{"{name, paused, generation, resourceVersion}"}},
		{"resume", []string{"{name, paused, generation, resourceVersion}"}},
	} {
		out, _, code := run(c.cmd, "--help")
		if code != 0 {
			t.Fatalf("%s --help: exit %d", c.cmd, code)
		}
		for _, f := range c.fields {
			if !strings.Contains(out, f) {
				t.Errorf("%s --help does not list %q", c.cmd, f)
			}
		}
	}
	out, _, _ := run("--help")
	if !strings.Contains(out, "kubectl nodeconfig [command]") {
		t.Errorf("the root's help does not name the plugin as kubectl runs it:\n%s", out)
	}
}

func TestPauseText(t *testing.T) {
	if got := PauseText(PauseResult{Name: "demo", Paused: true, Generation: 4}); !strings.HasPrefix(got, "NodeConfig demo paused (spec.rollout.paused=true, generation 4)") {
		t.Errorf("pause: %q", got)
	}
	if got := PauseText(PauseResult{Name: "demo", Generation: 5}); !strings.HasPrefix(got, "NodeConfig demo resumed (spec.rollout.paused=false, generation 5)") {
		t.Errorf("resume: %q", got)
	}
}
