package realnode_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeconfig.io/test/framework/nodeview"
	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/realnode"
)

const (
	namespace = "nodeconfig-system"
	dropIn    = "50-nodeconfig.conf"
)

// The install exactly as the README's "Install on a cluster" says, on a real
// kubelet: the agent DaemonSet and both reconciler replicas run and stay up;
// a NodeConfig with validator kubelet rolls a drop-in into the kubelet's
// --config-dir, the agent restarts the kubelet, which runs it, and the Node
// goes active -> soaking -> last-known-good; the agent finds the kubelet's
// files on its command line, and installed on a kubelet without
// --config-dir it refuses, writes nothing and says the flag to add, then
// follows the kubelet once it has it; a config the validator lets
// through but the kubelet refuses is rolled back by the agent, the kubelet
// is healthy on last-known-good and the rollout halts; deleting the
// NodeConfig brings the kubelet back to its base config. Nobody touches the
// kubelet but the agent. Throughout, a process posing as the kubelet outside
// its cgroup is never signalled and never counts as the kubelet (which would
// hold its restarts or fake a crash loop).
func TestInstallAsTheReadmeSaysOnARealKubelet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	client := node.Cluster.Client
	work := t.TempDir()
	decoy := startDecoyKubelet(t)
	defer decoy.checkNeverSignalled(t)
	withConfigDir := restartKubeletWithoutConfigDir(ctx, t)
	starts := node.Kubelet.Starts()
	if err := node.Install(ctx, work, func(s string) { t.Log(s) }); err != nil {
		t.Fatalf("README install: %v\n%s", err, diagnose(ctx))
	}

	// Both replicas Ready, one leader among them; the agent and statusd
	// Ready, statusd without root nor the host's PIDs.
	pods := waitInstallReady(ctx, t)
	checkAgentsPrivileges(t)
	lease, err := client.CoordinationV1().Leases(namespace).Get(ctx, "nodeconfig-reconciler", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil {
		t.Fatalf("no leader: %v %+v", err, lease)
	}
	if leader := *lease.Spec.HolderIdentity; leader != pods[0].Name && leader != pods[1].Name {
		t.Fatalf("leader %q is neither replica (%s, %s)", leader, pods[0].Name, pods[1].Name)
	}
	attackWithTheAgentsTokens(ctx, t)

	// The agent writes the drop-in where the real kubelet reads it, once
	// the kubelet has a --config-dir.
	cm, err := client.CoreV1().ConfigMaps("kube-system").Get(ctx, "kubelet-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Read before the agent can write: once it does, it may restart the
	// kubelet before the Node says the config is active.
	starts = refusedWithoutConfigDir(ctx, t, cm.ResourceVersion, withConfigDir, starts)
	waitFile(t, filepath.Join(realnode.ConfigDir, dropIn), cm.Data["config.yaml"])
	waitStatus(ctx, t, "the new config active", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return nodeview.ResourceVersion(st.Active) == cm.ResourceVersion
	})
	waitKubeletMaxPods(ctx, t, 57)
	if node.Kubelet.Starts() == starts {
		t.Fatal("the kubelet runs the drop-in without having been restarted")
	}

	waitStatus(ctx, t, "soaking", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return c.Reason == "Soaking" || nodeview.ResourceVersion(st.LastKnownGood) == cm.ResourceVersion
	})
	waitStatus(ctx, t, "last-known-good", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return nodeview.ResourceVersion(st.LastKnownGood) == cm.ResourceVersion && c.Status == corev1.ConditionTrue && c.Reason == "Active"
	})

	// The agent SIGKILLed while the kubelet is down after the agent stopped
	// it: when both are back, the agent finishes the job (health, soak,
	// last-known-good) and the kubelet runs the new config.
	node.Kubelet.Hold()
	stopped := node.Kubelet.Starts()
	runReadmeCommand(ctx, t, work, `printf 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 58\n' > next.yaml && kubectl create configmap kubelet-config -n kube-system --from-file=config.yaml=./next.yaml --dry-run=client -o yaml | kubectl apply -f -`)
	if err := proc.WaitFor(time.Minute, func() (bool, error) {
		return !node.Kubelet.Running() && node.Kubelet.Starts() == stopped, fmt.Errorf("the agent has not stopped the kubelet")
	}); err != nil {
		t.Fatal(err)
	}
	agentPid := checkpointdPid(t)
	if err := syscall.Kill(agentPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	node.Kubelet.Release()
	cm, err = client.CoreV1().ConfigMaps("kube-system").Get(ctx, "kubelet-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitKubeletMaxPods(ctx, t, 58)
	waitStatus(ctx, t, "last-known-good after the agent was killed mid-restart", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return nodeview.ResourceVersion(st.LastKnownGood) == cm.ResourceVersion && c.Reason == "Active"
	})
	if pid := checkpointdPid(t); pid == agentPid {
		t.Fatalf("checkpointd still runs as pid %d: the kill did not land", pid)
	}

	// A drop-in the kubelet's validation accepts alone (it passes the
	// reconciler's central check) but refuses merged with this node's base
	// config, whose imageGCLowThresholdPercent 99 is not below 90: the agent
	// judges it merged before writing it, so it is rolled back without the
	// kubelet ever being restarted onto it.
	starts = node.Kubelet.Starts()
	runReadmeCommand(ctx, t, work, `printf 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nimageGCHighThresholdPercent: 90\n' > merged.yaml && kubectl create configmap kubelet-config -n kube-system --from-file=config.yaml=./merged.yaml --dry-run=client -o yaml | kubectl apply -f -`)
	waitStatus(ctx, t, "refused merged with the node's base config", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return c.Status == corev1.ConditionFalse && c.Reason == "RolledBack" && nodeview.ResourceVersion(st.Active) == cm.ResourceVersion &&
			strings.Contains(c.Message, "imageGCLowThresholdPercent (--image-gc-low-threshold) 99 must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 90")
	})
	if content, err := os.ReadFile(filepath.Join(realnode.ConfigDir, dropIn)); err != nil || !strings.Contains(string(content), "maxPods: 58") {
		t.Fatalf("drop-in after the refusal: %q, %v", content, err)
	}
	if node.Kubelet.Starts() != starts {
		t.Fatalf("the kubelet was restarted (%d starts, %d before) for a drop-in the agent refused", node.Kubelet.Starts(), starts)
	}

	// A config the validator lets through and the kubelet refuses (it exits
	// 1 on it, and its supervisor starts it again and again): the agent
	// rolls it back, the kubelet is healthy on last-known-good, and the
	// rollout halts at its first failure.
	good := cm.ResourceVersion
	maxPodsGood := int64(58)
	runReadmeCommand(ctx, t, work, `kubectl patch nodeconfig workers --type merge -p '{"spec":{"validator":"none","rollout":{"maxFailures":1}}}'`)
	starts = node.Kubelet.Starts()
	logFrom := kubeletLogSize(t)
	runReadmeCommand(ctx, t, work, `printf 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: "abc"\n' > bad.yaml && kubectl create configmap kubelet-config -n kube-system --from-file=config.yaml=./bad.yaml --dry-run=client -o yaml | kubectl apply -f -`)
	waitStatus(ctx, t, "rolled back because the kubelet is unhealthy", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		// The kubelet's own words: its exit line names the field it refused.
		return c.Status == corev1.ConditionFalse && c.Reason == "ConsumerUnhealthy" && nodeview.ResourceVersion(st.Active) == good &&
			nodeview.ResourceVersion(st.Assigned) != good && strings.Contains(c.Message, "maxPods")
	})
	waitKubeletMaxPods(ctx, t, maxPodsGood)
	if content, err := os.ReadFile(filepath.Join(realnode.ConfigDir, dropIn)); err != nil || !strings.Contains(string(content), "maxPods: 58") {
		t.Fatalf("drop-in after the rollback: %q, %v", content, err)
	}
	// Not the agent's report but the kubelet's: started onto the bad
	// config, where it exited naming the field, and started again onto
	// last-known-good, where it is healthy.
	if got := node.Kubelet.Starts() - starts; got < 2 {
		t.Errorf("%d kubelet starts since the bad config was applied; want at least 2 (onto it, and back onto last-known-good)", got)
	}
	checkKubeletRefused(t, logFrom, "KubeletConfiguration.maxPods")
	waitKubeletHealthyOn(ctx, t, maxPodsGood)
	runReadmeCommand(ctx, t, work, `kubectl wait nodeconfig workers --for=jsonpath='{.status.conditions[?(@.type=="Degraded")].reason}'=RolloutHalted --timeout=60s`)

	outsideKillAndRuntimeDown(ctx, t, work)
	startGuardWithoutAgent(ctx, t, work)
	healthGatesRollBack(ctx, t, work)
	prometheusGate(ctx, t, work)
	restartOnlyWhenNeeded(ctx, t, work)
	readmeStatusAndIncident(ctx, t, work)
	// The power cut restarted every container once: counted from here.
	restartsAfterBoot := containerRestarts(ctx, t)
	disruptionByField(ctx, t, work)

	// Deleting the NodeConfig resets the node: no drop-in, the base config.
	runReadmeCommand(ctx, t, work, "kubectl delete nodeconfig workers --wait=true --timeout=2m")
	waitGone(t, filepath.Join(realnode.ConfigDir, dropIn))
	waitStatus(ctx, t, "the local default", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return st.Assigned == nil && st.Active == nil && st.LastKnownGood == nil && c.Reason == "LocalDefault"
	})
	waitKubeletMaxPods(ctx, t, 110)

	// No container of the install restarted: a crash loop fails the test.
	list, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		for _, s := range p.Status.ContainerStatuses {
			restarts := restartsAfterBoot[p.Name+"/"+s.Name]
			if s.RestartCount != restarts || !s.Ready {
				t.Errorf("pod %s container %s: ready=%v restarts=%d (last state %+v)", p.Name, s.Name, s.Ready, s.RestartCount, s.LastTerminationState)
			}
		}
	}
}

func runReadmeCommand(ctx context.Context, t *testing.T, dir, line string) {
	t.Helper()
	out, err := node.Shell(ctx, dir, line)
	if err != nil {
		t.Fatalf("%v\n%s", err, diagnose(ctx))
	}
	t.Logf("$ %s\n%s", line, out)
}

// diagnose says what the install's pods are doing, for a failure message.
func diagnose(ctx context.Context) string {
	var b strings.Builder
	list, err := node.Cluster.Client.CoreV1().Pods("").List(context.WithoutCancel(ctx), metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	for _, p := range list.Items {
		fmt.Fprintf(&b, "pod %s/%s node=%q phase=%s\n", p.Namespace, p.Name, p.Spec.NodeName, p.Status.Phase)
		for _, c := range p.Status.Conditions {
			fmt.Fprintf(&b, "  %s=%s %s\n", c.Type, c.Status, c.Message)
		}
		for _, s := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, "  container %s ready=%v restarts=%d state=%+v last=%+v\n", s.Name, s.Ready, s.RestartCount, s.State, s.LastTerminationState)
		}
	}
	return b.String()
}

// waitInstallReady waits until every Pod of the install is Ready: both
// reconciler replicas, which it returns, checkpointd's and statusd's.
func waitInstallReady(ctx context.Context, t *testing.T) []corev1.Pod {
	t.Helper()
	pods := waitPodsReady(ctx, t, "app.kubernetes.io/name=nodeconfig-reconciler", 2)
	waitPodsReady(ctx, t, "app.kubernetes.io/name=nodeconfig-agent", 1)
	waitPodsReady(ctx, t, "app.kubernetes.io/name=nodeconfig-status", 1)
	return pods
}

func waitPodsReady(ctx context.Context, t *testing.T, selector string, want int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	err := proc.WaitFor(3*time.Minute, func() (bool, error) {
		list, err := node.Cluster.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		pods = nil
		for _, p := range list.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					pods = append(pods, p)
				}
			}
		}
		return len(pods) == want && len(list.Items) == want, fmt.Errorf("%d of %d pods %s ready, want %d", len(pods), len(list.Items), selector, want)
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, diagnose(ctx))
	}
	return pods
}

func waitStatus(ctx context.Context, t *testing.T, what string, check func(corev1.NodeConfigStatus, *corev1.NodeCondition) bool) {
	t.Helper()
	waitStatusWithin(ctx, t, 2*time.Minute, what, check)
}

// waitKubeletMaxPods waits until the running kubelet uses maxPods, as it
// says itself (/configz) and as the Node's capacity shows it.
func waitKubeletMaxPods(ctx context.Context, t *testing.T, want int64) {
	t.Helper()
	err := proc.WaitFor(time.Minute, func() (bool, error) {
		cfg, err := node.Configz(ctx)
		if err != nil {
			return false, err
		}
		if got, _ := cfg["maxPods"].(float64); int64(got) != want {
			return false, fmt.Errorf("configz maxPods %v", cfg["maxPods"])
		}
		n, err := node.Cluster.Client.CoreV1().Nodes().Get(ctx, realnode.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if got := n.Status.Capacity.Pods().Value(); got != want {
			return false, fmt.Errorf("capacity.pods %d", got)
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("kubelet maxPods %d: %v", want, err)
	}
}

// waitKubeletHealthyOn waits until the kubelet's /healthz answers ok and
// its /configz shows maxPods want, both in one run of it (one pid before
// and after): healthy on that config, not on the way to another.
func waitKubeletHealthyOn(ctx context.Context, t *testing.T, want int64) {
	t.Helper()
	err := proc.WaitFor(time.Minute, func() (bool, error) {
		pid := node.Kubelet.Pid()
		if !realnode.KubeletHealthy() {
			return false, fmt.Errorf("%s does not answer ok", realnode.KubeletHealthz)
		}
		cfg, err := node.Configz(ctx)
		if err != nil {
			return false, err
		}
		if got, _ := cfg["maxPods"].(float64); int64(got) != want {
			return false, fmt.Errorf("healthy, but configz maxPods %v", cfg["maxPods"])
		}
		return node.Kubelet.Pid() == pid, fmt.Errorf("the kubelet restarted while being checked")
	})
	if err != nil {
		t.Fatalf("the kubelet healthy on maxPods %d: %v", want, err)
	}
}

// kubeletLog is the file the kubelet's output goes to, which the test
// reads itself rather than trusting the agent's account of it.
func kubeletLog() string { return filepath.Join(node.Logs, "kubelet.log") }

// kubeletLogSize is how much the kubelet has logged so far: what it logs
// after a change starts there.
func kubeletLogSize(t *testing.T) int64 {
	t.Helper()
	fi, err := os.Stat(kubeletLog())
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// checkKubeletRefused reads the kubelet's log from byte from on: one of
// its runs ended with the kubelet's exit line ("command failed") naming
// field, and a later run started after it.
func checkKubeletRefused(t *testing.T, from int64, field string) {
	t.Helper()
	b, err := os.ReadFile(kubeletLog())
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(b)) < from {
		t.Fatalf("%s shrank from %d to %d bytes", kubeletLog(), from, len(b))
	}
	lines := strings.Split(string(b[from:]), "\n")
	exit, start := -1, -1
	for i, l := range lines {
		if strings.Contains(l, `"command failed"`) && strings.Contains(l, field) {
			exit = i
		}
		// The line the kubelet's supervisor writes before each start.
		if strings.HasPrefix(l, "=== ") {
			start = i
		}
	}
	tail := string(b[max(from, int64(len(b))-4000):])
	if exit < 0 {
		t.Errorf("no exit line of the kubelet naming %s in %s since the change; its end:\n%s", field, kubeletLog(), tail)
		return
	}
	if start < exit {
		t.Errorf("the kubelet was not started again after its exit line %q", lines[exit])
		return
	}
	t.Logf("the kubelet's exit line: %s", lines[exit])
}

func waitFile(t *testing.T, path, want string) {
	t.Helper()
	var got []byte
	err := proc.WaitFor(2*time.Minute, func() (bool, error) {
		var err error
		got, err = os.ReadFile(path)
		return err == nil && string(got) == want, err
	})
	if err != nil {
		t.Fatalf("%s: %v (content %q, want %q)\n%s", path, err, got, want, diagnose(context.Background()))
	}
}

func waitGone(t *testing.T, path string) {
	t.Helper()
	err := proc.WaitFor(2*time.Minute, func() (bool, error) {
		_, err := os.Stat(path)
		return os.IsNotExist(err), fmt.Errorf("%s still there (%v)", path, err)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkpointdPid finds the agent's checkpointd on the host (the images'
// entrypoint is /service; checkpointd's arguments name its store).
func checkpointdPid(t *testing.T) int {
	t.Helper()
	var found int
	err := proc.WaitFor(time.Minute, func() (bool, error) {
		found = agentProcess()
		return found != 0, fmt.Errorf("no checkpointd process")
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// applyMaxPods applies a kubelet-config ConfigMap that sets maxPods, as the
// README's commands do, and returns its version.
func applyMaxPods(ctx context.Context, t *testing.T, work string, maxPods int) string {
	t.Helper()
	runReadmeCommand(ctx, t, work, fmt.Sprintf(`printf 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: %d\n' > max.yaml && kubectl create configmap kubelet-config -n kube-system --from-file=config.yaml=./max.yaml --dry-run=client -o yaml | kubectl apply -f -`, maxPods))
	cm, err := node.Cluster.Client.CoreV1().ConfigMaps("kube-system").Get(ctx, "kubelet-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm.ResourceVersion
}

// waitKubeletStarts waits until the kubelet's supervisor has started it
// want times.
func waitKubeletStarts(t *testing.T, want int, why string) {
	t.Helper()
	if err := proc.WaitFor(2*time.Minute, func() (bool, error) {
		return node.Kubelet.Starts() >= want, fmt.Errorf("%d kubelet starts", node.Kubelet.Starts())
	}); err != nil {
		t.Fatalf("%s: %v", why, err)
	}
}

// outsideKillAndRuntimeDown: what the agent did not cause is not the
// config's fault. The kubelet killed mid-soak by something else and started
// again by its supervisor RestartDelay (kubeadm's RestartSec) later: the
// soak pauses and the config is promoted. containerd down while the agent
// restarts the kubelet onto a new config, so that the kubelet exits at start
// again and again: the node holds, nothing is rolled back, and once
// containerd is back the kubelet runs the config and it is promoted.
func outsideKillAndRuntimeDown(ctx context.Context, t *testing.T, work string) {
	runReadmeCommand(ctx, t, work, `kubectl patch nodeconfig workers --type merge -p '{"spec":{"soakSeconds":30}}'`)
	rv := applyMaxPods(ctx, t, work, 59)
	waitStatus(ctx, t, "soaking maxPods 59", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return nodeview.ResourceVersion(st.Active) == rv && c.Reason == "Soaking"
	})
	waitKubeletMaxPods(ctx, t, 59)
	starts := node.Kubelet.Starts()
	if err := syscall.Kill(node.Kubelet.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitKubeletStarts(t, starts+1, "the supervisor never started the killed kubelet again")
	waitStatus(ctx, t, "maxPods 59 promoted after the outside kill", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return nodeview.ResourceVersion(st.LastKnownGood) == rv && c.Reason == "Active"
	})
	if got := node.Kubelet.Starts(); got != starts+1 {
		t.Fatalf("%d kubelet starts since the outside kill; want 1 (the supervisor's): the agent restarted it again", got-starts)
	}

	runReadmeCommand(ctx, t, work, `kubectl patch nodeconfig workers --type merge -p '{"spec":{"soakSeconds":10}}'`)
	if err := node.Containerd.Stop(30 * time.Second); err != nil {
		t.Logf("containerd stopped: %v", err)
	}
	restarted := false
	defer func() {
		if !restarted {
			_ = node.Containerd.Restart()
		}
	}()
	starts = node.Kubelet.Starts()
	next := applyMaxPods(ctx, t, work, 60)
	// Three starts on the new file, each refused for want of a runtime,
	// span twice the agent's 20 s health timeout: time enough to blame.
	waitKubeletStarts(t, starts+4, "the kubelet was not restarted onto the new config")
	st, c, err := nodeview.Read(ctx, node.Cluster.Client, realnode.NodeName)
	if err != nil {
		t.Fatal(err)
	}
	if nodeview.ResourceVersion(st.Active) != next || c.Reason == "RolledBack" || c.Reason == "ConsumerUnhealthy" || st.Error != "" {
		t.Fatalf("with containerd down: %+v %s %q; want maxPods 60 still active and nothing blamed", st, c.Reason, c.Message)
	}
	if err := node.Containerd.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	waitKubeletMaxPods(ctx, t, 60)
	waitStatus(ctx, t, "maxPods 60 promoted once containerd is back", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return nodeview.ResourceVersion(st.LastKnownGood) == next && c.Reason == "Active"
	})
	if err := node.WaitNodeReady(ctx, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
}

// startGuardWithoutAgent: a drop-in the kubelet cannot start on, and a
// reboot before anything could undo it: every process of the node killed
// (the kubelet, every container, the agent's among them, and containerd),
// then only containerd and the kubelet's supervisor started, as a boot
// does. The start guard the supervisor runs before each start (the systemd
// drop-in's ExecStartPre) puts last-known-good back by itself after its
// threshold of starts, with no pod running; the agent, back once the
// kubelet runs, records the fallback as the version's late error.
func startGuardWithoutAgent(ctx context.Context, t *testing.T, work string) {
	lkg, err := os.ReadFile(filepath.Join(realnode.ConfigDir, dropIn))
	if err != nil {
		t.Fatal(err)
	}
	st, _, err := nodeview.Read(ctx, node.Cluster.Client, realnode.NodeName)
	if err != nil {
		t.Fatal(err)
	}
	good := nodeview.ResourceVersion(st.LastKnownGood)
	agentPid := checkpointdPid(t)
	logFrom := kubeletLogSize(t)
	runReadmeCommand(ctx, t, work, `printf 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: "xyz"\n' > xyz.yaml && kubectl create configmap kubelet-config -n kube-system --from-file=config.yaml=./xyz.yaml --dry-run=client -o yaml | kubectl apply -f -`)
	if err := proc.WaitFor(time.Minute, func() (bool, error) {
		b, err := os.ReadFile(filepath.Join(realnode.ConfigDir, dropIn))
		return err == nil && strings.Contains(string(b), "xyz"), fmt.Errorf("drop-in %q, %v", b, err)
	}); err != nil {
		t.Fatalf("the agent never wrote the bad drop-in: %v", err)
	}
	if err := node.PowerOff(); err != nil {
		t.Fatal(err)
	}
	if pid := agentProcess(); pid != 0 {
		t.Fatalf("the agent (pid %d) still runs after the power cut", pid)
	}
	if err := node.Boot(); err != nil {
		t.Fatal(err)
	}
	// No pod runs until the kubelet does: whatever puts last-known-good
	// back before that is the guard's work.
	if err := proc.WaitFor(3*time.Minute, func() (bool, error) {
		b, err := os.ReadFile(filepath.Join(realnode.ConfigDir, dropIn))
		if err == nil && string(b) == string(lkg) {
			return true, nil
		}
		if pid := agentProcess(); pid != 0 {
			t.Fatalf("an agent (pid %d) runs while the drop-in still holds %q: not a recovery without a pod", pid, b)
		}
		return false, fmt.Errorf("drop-in %q, %v; %d kubelet starts since the boot", b, err, node.Kubelet.Starts())
	}); err != nil {
		t.Fatalf("the start guard did not put last-known-good back: %v", err)
	}
	// The guard logs its fallback once the drop-in is back, so the line
	// may trail the file by a moment.
	if err := proc.WaitFor(30*time.Second, func() (bool, error) {
		log, err := os.ReadFile(filepath.Join(node.Logs, "exec-start-pre.log"))
		return err == nil && strings.Contains(string(log), "the agent records it as the trial's late error"),
			fmt.Errorf("guard log %q (%v)", log, err)
	}); err != nil {
		t.Fatalf("%v; want its fallback line", err)
	}
	if node.Kubelet.Starts() < guardThreshold+1 {
		t.Fatalf("%d kubelet starts since the boot; the guard falls back only past %d", node.Kubelet.Starts(), guardThreshold)
	}
	waitKubeletMaxPods(ctx, t, 60)
	checkKubeletRefused(t, logFrom, "KubeletConfiguration.maxPods")
	waitKubeletHealthyOn(ctx, t, 60)
	waitStatus(ctx, t, "the guard's fallback recorded by the agent", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return c.Status == corev1.ConditionFalse && c.Reason == "StartGuardFellBack" && nodeview.ResourceVersion(st.Active) == good
	})
	if pid := checkpointdPid(t); pid == agentPid {
		t.Fatalf("checkpointd still runs as pid %d: the power cut did not land", pid)
	}
	if err := node.WaitNodeReady(ctx, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	waitInstallReady(ctx, t)
}

// agentProcess is the pid of a running checkpointd of the install, 0 for
// none.
func agentProcess() int { return installProcess("--consumer-restart") }

// installProcess is the pid of a running process of the install (the
// images' entrypoint is /service) whose arguments hold arg, 0 for none.
func installProcess(arg string) int {
	procs, _ := procfs.AllProcs()
	for _, p := range procs {
		if args, err := p.CmdLine(); err == nil && len(args) > 0 && args[0] == "/service" && strings.Contains(strings.Join(args, "\x00"), arg) {
			return p.PID
		}
	}
	return 0
}

// guardThreshold is the start guard's default: starts under a trial before
// it falls back.
const guardThreshold = 3

// containerRestarts maps each container of the install ("pod/container")
// to its restart count now.
func containerRestarts(ctx context.Context, t *testing.T) map[string]int32 {
	t.Helper()
	list, err := node.Cluster.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int32{}
	for _, p := range list.Items {
		for _, s := range p.Status.ContainerStatuses {
			out[p.Name+"/"+s.Name] = s.RestartCount
		}
	}
	return out
}
