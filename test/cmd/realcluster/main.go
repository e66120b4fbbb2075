// Command realcluster is 'make cluster': the real one-node cluster of the
// tests (containerd, a kubelet, the control plane, all on loopback and a pod
// bridge of its own) with nodeconfig installed as the README says, a sample
// NodeConfig rolling a drop-in to the kubelet, and the commands to try next.
// Ctrl-C stops everything and undoes every change to the host. It needs root.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/realnode"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	bin, err := proc.BinDir()
	if err != nil {
		return err
	}
	var images []string
	for _, s := range []string{"checkpointd", "statusd", "reconciler"} {
		images = append(images, filepath.Join(bin, "images", s+".tar"))
	}
	start := time.Now()
	fmt.Println("starting the control plane, containerd and the kubelet...")
	node, err := realnode.Start(ctx, images...)
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("\nstopping and undoing every change to the host...")
		if err := node.Stop(""); err != nil {
			fmt.Fprintln(os.Stderr, "error:", err)
		}
		for _, l := range node.Leftovers() {
			fmt.Fprintln(os.Stderr, "left on the host:", l)
		}
	}()
	work := filepath.Join(realnode.Root, "install")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	fmt.Printf("node %s Ready in %s; installing as the README says (in %s)...\n", realnode.NodeName, time.Since(start).Round(time.Second), work)
	if err := node.Install(ctx, work, func(s string) { fmt.Print(s) }); err != nil {
		return err
	}
	kc := node.Cluster.Kubeconfig
	fmt.Printf(`
ready: a real kubelet, nodeconfig installed, and NodeConfig "workers" rolling maxPods: 57 (in %s)

  export KUBECONFIG=%s
  kubectl get nodes,nodeconfigs
  kubectl -n nodeconfig-system get pods -o wide
  kubectl get node %s -o jsonpath='{.metadata.annotations.nodeconfig\.io/config-status}'; echo
  cat %s/50-nodeconfig.conf                       # the drop-in the agent wrote
  kill $(cat %s)     # restart the kubelet by hand (the agent does it after every change; its supervisor starts it again)
  kubectl get node %s -o jsonpath='{.status.capacity.pods}'; echo   # 57 once it runs the drop-in
  tail %s/nodeconfig-system_nodeconfig-agent-*/checkpointd/*.log   # the agent's log
  kubectl delete nodeconfig workers                # back to the kubelet's base config

Logs: %s. Ctrl-C stops everything and undoes every change to the host.
`, time.Since(start).Round(time.Second), kc, realnode.NodeName, realnode.ConfigDir, realnode.KubeletPidFile, realnode.NodeName, realnode.PodLogs, node.Logs)
	<-ctx.Done()
	return nil
}
