package integration

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"nodeconfig.io/services/api/client/clientset"
	"nodeconfig.io/test/framework/proc"
)

// runbookCommand is a command in backquotes on a runbook page: kubectl,
// or the plugin through kubectl.
var runbookCommand = regexp.MustCompile("`(kubectl[^`]*)`")

// The names a runbook's placeholders take in 'make run', longest first.
var runbookNames = []struct{ placeholder, value string }{
	{"NODECONFIG", "demo"},
	{"CONFIGMAP", "kubelet-config"},
	{"NAMESPACE", "nodeconfig-demo"},
	{"NODE", "node-0"},
}

// Commands that read what only the in-cluster install has (the
// reconciler's Deployment): against 'make run' they parse, reach the API
// server and are told it is not there.
var needsTheInstall = map[string]string{
	"kubectl -n nodeconfig-system logs deploy/nodeconfig-reconciler": `deployments.apps "nodeconfig-reconciler" not found`,
}

// Every command of docs/runbooks, as written with the demo's names, runs
// against 'make run': kubectl as it is, the plugin as kubectl finds it on
// PATH (with the reconciler's address, which 'make run' serves on
// 127.0.0.1), in page order, each page in a directory of its own.
func TestRunbookCommands(t *testing.T) {
	root, err := proc.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	binDir, err := proc.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	plugin, err := proc.Binary("kubectl-nodeconfig")
	if err != nil {
		t.Fatal(err)
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "runbooks", "NodeConfig*.md"))
	if err != nil || len(pages) == 0 {
		t.Fatalf("no runbook pages: %v", err)
	}
	sort.Strings(pages)
	commands := map[string][]string{}
	for _, p := range pages {
		text, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range runbookCommand.FindAllStringSubmatch(string(text), -1) {
			c := strings.Join(strings.Fields(m[1]), " ")
			for _, n := range runbookNames {
				c = regexp.MustCompile(`\b`+n.placeholder+`\b`).ReplaceAllString(c, n.value)
			}
			commands[p] = append(commands[p], c)
		}
		if len(commands[p]) == 0 {
			t.Errorf("%s has no kubectl command", filepath.Base(p))
		}
	}

	state, err := os.MkdirTemp("", "nc-runbooks-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(state) })
	// kubectl finds the plugin on PATH; the plugin finds the kubelet
	// validator on PATH (bin/).
	path := filepath.Join(state, "path")
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(binDir, "kubectl"), filepath.Join(path, "kubectl")); err != nil {
		t.Fatal(err)
	}
	shim := "#!/bin/sh\nexec " + plugin + " \"$@\" --reconciler " + makeRunReconciler + "\n"
	if err := os.WriteFile(filepath.Join(path, "kubectl-nodeconfig"), []byte(shim), 0o755); err != nil {
		t.Fatal(err)
	}
	lr := startMakeRun(t, state)
	env := append(os.Environ(), "PATH="+path+":"+binDir+":"+os.Getenv("PATH"), "KUBECONFIG="+lr.kubeconfig())

	// The demo rollout finishes first, so that the nodes have a version to
	// show.
	cfg, err := clientcmd.BuildConfigFromFlags("", lr.kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	ncs := clientset.NewForConfigOrDie(cfg)
	err = proc.WaitFor(2*time.Minute, func() (bool, error) {
		nc, err := ncs.NodeConfigV1alpha1().NodeConfigs().Get(context.Background(), "demo", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return conditionReason(nc, "Ready") == "AllNodesActive", nil
	})
	if err != nil {
		t.Fatalf("the demo rollout did not finish: %v", err)
	}

	ran := 0
	for _, p := range pages {
		dir := t.TempDir()
		for _, c := range commands[p] {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			cmd := exec.CommandContext(ctx, "bash", "-c", c)
			cmd.Dir, cmd.Env = dir, env
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			cancel()
			ran++
			page := filepath.Base(p)
			if want, ok := needsTheInstall[c]; ok {
				if err == nil || !strings.Contains(stderr.String(), want) {
					t.Errorf("%s: $ %s: want it to fail with %q (make run has no Deployment): %v\n%s%s", page, c, want, err, stdout.String(), stderr.String())
				}
				continue
			}
			if err != nil {
				t.Errorf("%s: $ %s: %v\n%s%s", page, c, err, stdout.String(), stderr.String())
				continue
			}
			if strings.HasPrefix(c, "kubectl nodeconfig ") && !strings.Contains(c, ">") && strings.TrimSpace(stdout.String()) == "" {
				t.Errorf("%s: $ %s printed nothing", page, c)
			}
			t.Logf("%s: $ %s\n%s", page, c, stdout.String())
		}
	}
	if ran < 15 {
		t.Errorf("ran %d runbook commands", ran)
	}
}
