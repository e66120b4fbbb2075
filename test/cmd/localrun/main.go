// Command localrun is 'make run': a real control plane, simulated nodes with
// checkpointd and statusd, the reconciler, a sample ConfigMap and
// NodeConfig, and the commands to try next. Ctrl-C stops all of it; state
// under --state survives, so the next run resumes.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"nodeconfig.io/services/api/client/clientset"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/test/framework/cluster"
	"nodeconfig.io/test/framework/sim"
)

const (
	demoNamespace = "nodeconfig-demo"
	demoConfigMap = "kubelet-config"
	demoKey       = "config.yaml"
	demoLabel     = "nodeconfig.io/demo"
	goodConfig    = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 110\nserializeImagePulls: false\n"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run() error {
	nodes := flag.Int("nodes", 3, "simulated nodes")
	state := flag.String("state", ".run", "state directory (kept across runs)")
	bin := flag.String("bin", "bin", "directory of the built binaries")
	soak := flag.Int("soak-seconds", 30, "soak of the sample NodeConfig")
	flag.Parse()
	if *nodes < 1 || *nodes > 50 {
		return fmt.Errorf("--nodes %d: want 1 to 50", *nodes)
	}
	root, err := filepath.Abs(*state)
	if err != nil {
		return err
	}
	binDir, err := filepath.Abs(*bin)
	if err != nil {
		return err
	}
	os.Setenv("NODECONFIG_BIN", binDir)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	say("starting etcd and kube-apiserver (state in %s)", root)
	c, err := cluster.Start(ctx, cluster.Options{Dir: filepath.Join(root, "cluster"), DurableEtcd: true})
	if err != nil {
		return err
	}
	defer c.Stop()
	kubeconfig := filepath.Join(root, "kubeconfig")
	if err := os.Symlink(c.Kubeconfig, kubeconfig); err != nil && !os.IsExist(err) {
		return err
	}

	var started []*sim.Node
	defer func() {
		for _, n := range started {
			n.Stop()
		}
	}()
	for i := range *nodes {
		name := fmt.Sprintf("node-%d", i)
		n, err := sim.StartNodeWith(ctx, c, root, name, sim.NodeOptions{
			Labels:          map[string]string{demoLabel: "true"},
			CheckpointdAddr: fmt.Sprintf("127.0.0.1:%d", 7601+10*i),
			StatusdAddr:     fmt.Sprintf("127.0.0.1:%d", 7602+10*i),
			KubeletConfig:   baseKubeletConfig(i),
		})
		if err != nil {
			return err
		}
		started = append(started, n)
		say("node %s: checkpointd %s (unix://%s), statusd %s, target file %s", name, n.CheckpointdAddr, n.Socket, n.StatusdAddr, filepath.Join(n.TargetDir, sim.TargetFile))
	}
	r, err := sim.StartReconcilerAt(ctx, c, root, "local", "127.0.0.1:7603")
	if err != nil {
		return err
	}
	defer r.Close()
	say("reconciler at %s", r.Addr)

	if err := sample(ctx, c, *soak); err != nil {
		return err
	}
	printNextSteps(kubeconfig, started[0])
	fmt.Println("ready")

	<-ctx.Done()
	say("stopping everything this run started")
	return nil
}

// sample creates the demo ConfigMap and NodeConfig unless they exist (a
// resumed run keeps what the user changed).
func sample(ctx context.Context, c *cluster.Cluster, soak int) error {
	if err := sim.EnsureNamespace(ctx, c, demoNamespace); err != nil {
		return err
	}
	_, err := c.Client.CoreV1().ConfigMaps(demoNamespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: demoConfigMap},
		Data:       map[string]string{demoKey: goodConfig},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	ncs, err := clientset.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	maxInTrial, maxFailures := intstr.FromString("50%"), int32(1)
	_, err = ncs.NodeConfigV1alpha1().NodeConfigs().Create(ctx, &v1alpha1.NodeConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "demo"},
		Spec: v1alpha1.NodeConfigSpec{
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{demoLabel: "true"}},
			Source:       &v1alpha1.Source{ConfigMap: &v1alpha1.ConfigMapSource{Namespace: demoNamespace, Name: demoConfigMap, Key: demoKey}},
			Validator:    "kubelet",
			SoakSeconds:  int64(soak),
			Rollout:      v1alpha1.Rollout{MaxInTrial: &maxInTrial, MaxFailures: &maxFailures},
		},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// printNextSteps prints commands that work as printed; lines starting with
// "  $ " are run by the make-run test.
// baseKubeletConfig is node i's own kubelet config, as each machine of a
// real fleet has one: the nodes differ (maxPods), so a drop-in merges into
// a different effective config on each (kubectl nodeconfig diff shows it).
func baseKubeletConfig(i int) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# The kubelet refuses a cgroup v1 host without this, and the agent judges as
# the kubelet on this host would.
failCgroupV1: false
maxPods: %d
`, 110+140*min(i, 1)+10*max(i-1, 0))
}

func printNextSteps(kubeconfig string, n0 *sim.Node) {
	k := "kubectl --kubeconfig " + kubeconfig
	fmt.Printf(`
nodeconfig is running: a real kube-apiserver, %[3]s and its siblings, and the reconciler.
The sample NodeConfig "demo" rolls ConfigMap %[4]s/%[5]s out to every node (soak 30s).

Look around:
  $ %[1]s get nodeconfigs
  $ %[1]s get nodes -L %[6]s
  $ %[1]s get node %[3]s -o jsonpath='{.metadata.annotations.nodeconfig\.io/config-status}'
  $ %[1]s describe node %[3]s
  $ %[1]s get events -A --field-selector involvedObject.kind=Node
  $ bin/grpcurl -plaintext 127.0.0.1:7603 nodeconfig.v1.ReconcilerService/ListNodes
  $ bin/grpcurl -plaintext -d '{"node_name":"%[3]s"}' 127.0.0.1:7603 nodeconfig.v1.ReconcilerService/GetNode
  $ bin/grpcurl -plaintext 127.0.0.1:7601 nodeconfig.v1.CheckpointService/GetRecords
  $ bin/grpcurl -plaintext -unix %[2]s nodeconfig.v1.CheckpointService/ListCheckpoints
  $ bin/grpcurl -plaintext 127.0.0.1:7602 nodeconfig.v1.StatusService/GetNodeStatus

Assign a bad config: the reconciler refuses it before any node gets it (a
bogus hairpinMode fails the kubelet's own validation), every node keeps its
config, and the NodeConfig says ConfigRefused:
  $ %[1]s -n %[4]s patch configmap %[5]s --type merge -p '{"data":{"%[7]s":"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nhairpinMode: bogus\n"}}'
    %[1]s get nodeconfig demo -o jsonpath='{.status.conditions[?(@.type=="Degraded")].message}'
    %[1]s get nodes -o custom-columns='NAME:.metadata.name,CONFIG:.status.conditions[?(@.type=="NodeConfigReady")].reason'

Fix it and the rollout goes on:
    %[1]s -n %[4]s patch configmap %[5]s --type merge -p '{"data":{"%[7]s":"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 90\n"}}'

Stop with Ctrl-C; 'make run' again resumes from %[8]s.
`, k, n0.Socket, n0.Name, demoNamespace, demoConfigMap, demoLabel, demoKey, filepath.Dir(filepath.Dir(filepath.Dir(n0.Socket))))
}

func say(format string, args ...any) {
	fmt.Printf("%s  %s\n", time.Now().Format("15:04:05"), strings.TrimSpace(fmt.Sprintf(format, args...)))
}
