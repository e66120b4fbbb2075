package realnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"nodeconfig.io/test/framework/proc"
)

// SampleFiles are the two files the README's install commands name, as a
// person would write them: a kubelet drop-in and a NodeConfig using it.
var SampleFiles = map[string]string{
	"kubelet.yaml": "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 57\n",
	"my-nodeconfig.yaml": `apiVersion: nodeconfig.io/v1alpha1
kind: NodeConfig
metadata:
  name: workers
spec:
  nodeSelector: {}
  source:
    configMap: {namespace: kube-system, name: kubelet-config, key: config.yaml}
  validator: kubelet
  soakSeconds: 10
`,
}

// InstallCommands are the shell commands of the README's "Install on a
// cluster" section, in order, continuation lines joined. Two are adapted,
// each for a reason of this machine: `kubectl apply -k deploy/` applies the
// overlay of this one-node loopback cluster (test/realnode/overlay), and
// watches (-w) are left out.
func InstallCommands() ([]string, error) {
	root, err := proc.RepoRoot()
	if err != nil {
		return nil, err
	}
	lines, err := ReadmeCommands("Install on a cluster")
	if err != nil {
		return nil, err
	}
	overlay := filepath.Join(root, "test", "realnode", "overlay")
	var cmds []string
	for _, line := range lines {
		if strings.Contains(line, " -w") {
			continue
		}
		line = strings.ReplaceAll(line, "apply -k deploy/", "apply -k "+overlay)
		line = strings.ReplaceAll(line, "-f deploy/", "-f "+filepath.Join(root, "deploy")+"/")
		line = strings.ReplaceAll(line, "bin/images/", filepath.Join(root, "bin", "images")+"/")
		cmds = append(cmds, line)
	}
	if len(cmds) < 8 {
		return nil, fmt.Errorf("found only %d commands in the README's install section: %q", len(cmds), cmds)
	}
	return cmds, nil
}

// ReadmeCommands are the shell lines of the README section whose heading
// begins with heading, in order: continuation lines joined, blank lines
// and comments left out.
func ReadmeCommands(heading string) ([]string, error) {
	root, err := proc.RepoRoot()
	if err != nil {
		return nil, err
	}
	buf, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		return nil, err
	}
	_, section, ok := strings.Cut(string(buf), "\n## "+heading)
	if !ok {
		return nil, fmt.Errorf("README.md has no section %q", heading)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var lines []string
	for _, b := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1) {
		for _, line := range strings.Split(strings.ReplaceAll(b[1], "\\\n", " "), "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				lines = append(lines, line)
			}
		}
	}
	return lines, nil
}

// Shell runs one command line with bash in dir, as a person at this node
// would: kubectl talks to the node's cluster, ctr to its containerd.
func (n *Node) Shell(ctx context.Context, dir, line string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", line)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "KUBECONFIG="+n.Cluster.Kubeconfig, "CONTAINERD_ADDRESS="+n.containerd)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s: %v\n%s", line, err, out)
	}
	return out, nil
}

// Install writes SampleFiles into dir and runs the README's install commands
// there; log sees each command and its output.
func (n *Node) Install(ctx context.Context, dir string, log func(string)) error {
	for name, content := range SampleFiles {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	cmds, err := InstallCommands()
	if err != nil {
		return err
	}
	for _, line := range cmds {
		out, err := n.Shell(ctx, dir, line)
		if err != nil {
			return err
		}
		log(fmt.Sprintf("$ %s\n%s", line, out))
	}
	return nil
}
