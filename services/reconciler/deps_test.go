package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The reconciler does not link the kubelet's code (k8s.io/kubernetes): its
// package inits and binary pages cost every replica resident memory, for a
// check that runs once per new version in a child process instead
// (nodeconfig-kubelet-check, through configcheck/kubeletexec). The import
// chain that brings it back is in the failure.
func TestReconcilerDoesNotLinkKubernetes(t *testing.T) {
	const forbidden = "k8s.io/kubernetes"
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the reconciler's imports: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, gobin, "list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	imports := map[string][]string{}
	var root string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		imports[f[0]] = f[1:]
		root = f[0] // go list -deps prints the package itself last
	}
	if len(imports) < 100 || root != "nodeconfig.io/services/reconciler" {
		t.Fatalf("go list -deps listed %d packages ending with %q: not the reconciler's graph", len(imports), root)
	}
	// Breadth first from the reconciler, to the first forbidden package.
	from := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == forbidden || strings.HasPrefix(p, forbidden+"/") {
			chain := []string{p}
			for q := from[p]; q != ""; q = from[q] {
				chain = append([]string{q}, chain...)
			}
			t.Fatalf("the reconciler links %s again, through\n  %s\nrun the kubelet's code in nodeconfig-kubelet-check (configcheck/kubeletexec) instead", forbidden, strings.Join(chain, "\n  -> "))
		}
		for _, q := range imports[p] {
			if _, seen := from[q]; !seen {
				from[q] = p
				queue = append(queue, q)
			}
		}
	}
}
