// Package realnode runs a real one-node Kubernetes cluster on this machine:
// etcd and kube-apiserver (test/framework/cluster), kube-controller-manager,
// kube-scheduler, containerd and a kubelet that runs real pods. Everything
// listens on loopback, and pods live on a bridge the harness creates; no
// traffic goes anywhere else. It needs root, and undoes every change it makes
// to the host when it stops and, after a killed run, when it starts
// (hoststate).
package realnode

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"nodeconfig.io/test/framework/cluster"
	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/realnode/hoststate"
)

// The fixed facts of the node; test/realnode/overlay names Root's paths and
// the API server's address.
const (
	// Root holds all the node's state: the control plane's, containerd's,
	// the kubelet's and the agent's host directories.
	Root = "/var/lib/nodeconfig-realnode"
	// NodeName is the Node's name.
	NodeName = "nodeconfig-node"
	// Bridge carries the pods; Gateway is the host's address on it, the
	// node's InternalIP, where pods reach the API server and the kubelet.
	Bridge    = "ncbr0"
	PodSubnet = "10.244.0.0/24"
	Gateway   = "10.244.0.1"
	// APIPort is the API server's port (fixed: the overlay tells pods).
	APIPort = 16443
	// PauseImage is containerd's sandbox image, built by 'make images'
	// (PAUSE_IMAGE in the Makefile).
	PauseImage = "nodeconfig.local/pause:test"
	// KubeletHealthz is the kubelet's health endpoint.
	KubeletHealthz = "http://127.0.0.1:10248/healthz"
)

// Paths inside Root that the agent's hostPath volumes name.
var (
	// ConfigDir is the kubelet's --config-dir, where the agent writes its drop-in.
	ConfigDir = filepath.Join(Root, "kubelet.conf.d")
	// EtcKubernetes stands in for the host's /etc/kubernetes, which the
	// agent mounts read-only with its drop-in directory mounted read-write
	// below: it holds only that directory's mount point, as deploy/'s
	// hostPath makes it there on a host (the runtime cannot make one in a
	// read-only mount).
	EtcKubernetes = filepath.Join(Root, "etc-kubernetes")
	// AgentStateDir is the agent's store (deploy: /var/lib/nodeconfig).
	AgentStateDir = filepath.Join(Root, "agent-state")
	// KubeletPidFile is where the kubelet's supervisor writes its pid.
	KubeletPidFile = filepath.Join(Root, "kubelet.pid")
	// PodLogs is the kubelet's podLogsDir.
	PodLogs = filepath.Join(Root, "pod-logs")
)

// Node is a running one-node cluster.
type Node struct {
	Cluster           *cluster.Cluster
	Containerd        *proc.Process
	Kubelet           *Supervisor
	ControllerManager *proc.Process
	Scheduler         *proc.Process
	// KubeletConfig is the kubelet's base --config file.
	KubeletConfig string
	// Logs is the directory of every component's log.
	Logs string

	host       *hoststate.Before
	containerd string // socket
	// superviseKubelet starts the kubelet under a new supervisor (Boot),
	// with kubeletArgs.
	superviseKubelet func() (*Supervisor, error)
	kubeletArgs      []string
	adminClient      *http.Client
}

func binaries() (map[string]string, error) {
	bins := map[string]string{}
	for _, b := range []string{"kubelet", "kube-controller-manager", "kube-scheduler", "kube-apiserver", "etcd"} {
		path, err := proc.Binary(b)
		if err != nil {
			return nil, fmt.Errorf("%w (make nodebin testbin)", err)
		}
		bins[b] = path
	}
	for _, b := range []string{"containerd", "runc", "ctr", "/usr/lib/cni/bridge", "iptables"} {
		path, err := exec.LookPath(b)
		if err != nil {
			return nil, fmt.Errorf("%s is missing: make node-packages installs it from Debian", b)
		}
		bins[b] = path
	}
	return bins, nil
}

// Start brings the node up and waits until the Node is Ready. Images are
// docker-archive tarballs imported into containerd before the kubelet starts.
func Start(ctx context.Context, images ...string) (n *Node, err error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("the real node needs root (containerd, the kubelet, a bridge)")
	}
	bins, err := binaries()
	if err != nil {
		return nil, err
	}
	n = &Node{Logs: filepath.Join(Root, "logs"), containerd: containerdSocket}
	facts, err := hostFacts(bins)
	if err != nil {
		return nil, err
	}
	if n.host, err = hoststate.Take(facts); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w (logs in %s)", err, n.Logs)
			n.stopProcesses()
			if uerr := n.host.Undo(); uerr != nil {
				err = fmt.Errorf("%w; and undoing host changes: %v", err, uerr)
			}
		}
	}()
	for _, d := range []string{n.Logs, ConfigDir, AgentStateDir, KubeletUnitDir, filepath.Join(Root, "cni", "net.d"), filepath.Join(EtcKubernetes, "kubelet.conf.d")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := makeBridge(); err != nil {
		return nil, err
	}
	n.Cluster, err = cluster.Start(ctx, cluster.Options{
		Dir: filepath.Join(Root, "control-plane"), RealNode: true, PodsReachAt: net.ParseIP(Gateway), Port: APIPort,
	})
	if err != nil {
		return nil, fmt.Errorf("control plane: %w", err)
	}
	if err := n.startContainerd(bins["containerd"]); err != nil {
		return nil, err
	}
	for _, img := range append([]string{pauseTarball()}, images...) {
		if err := n.ImportImage(img); err != nil {
			return nil, err
		}
	}
	if err := n.startKubelet(bins["kubelet"]); err != nil {
		return nil, err
	}
	if err := n.startControllers(bins["kube-controller-manager"], bins["kube-scheduler"]); err != nil {
		return nil, err
	}
	if err := n.WaitNodeReady(ctx, 2*time.Minute); err != nil {
		return nil, err
	}
	// The node runs the control plane, and says so as kubeadm's would: the
	// reconciler runs only on control-plane nodes.
	patch := []byte(`{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}}}`)
	if _, err := n.Cluster.Client.CoreV1().Nodes().Patch(ctx, NodeName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return nil, fmt.Errorf("label the node control-plane: %w", err)
	}
	return n, nil
}

var containerdSocket = filepath.Join(Root, "containerd", "containerd.sock")

// hostFacts says which host state is the node's: its root, bridge, socket,
// binaries and the kubelet's cgroup.
func hostFacts(bins map[string]string) (hoststate.Before, error) {
	_, cgroup, err := kubeletCgroupDir()
	return hoststate.Before{
		Root: Root, Bridge: Bridge, Address: containerdSocket, KubeletCgroup: cgroup,
		Binaries: []string{KubeletBinary, bins["kubelet"], bins["kube-controller-manager"], bins["kube-scheduler"], bins["kube-apiserver"], bins["etcd"], bins["containerd"]},
	}, err
}

// ObserveHost records the host as it is once an earlier, killed run has been
// undone, to compare it with after a run of the node that this process does
// not control (make cluster). Observed before that undo, the host would carry
// the killed run's changes as if they were its own.
func ObserveHost() (*hoststate.Before, error) {
	bins, err := binaries()
	if err != nil {
		return nil, err
	}
	if err := hoststate.UndoLeftovers(Root); err != nil {
		return nil, fmt.Errorf("undo an earlier run's changes: %w", err)
	}
	facts, err := hostFacts(bins)
	if err != nil {
		return nil, err
	}
	return hoststate.Observe(facts), nil
}

func pauseTarball() string {
	bin, _ := proc.BinDir()
	return filepath.Join(bin, "images", "pause.tar")
}

func makeBridge() error {
	if l, err := netlink.LinkByName(Bridge); err == nil {
		_ = netlink.LinkDel(l)
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: Bridge}}
	if err := netlink.LinkAdd(br); err != nil {
		return fmt.Errorf("create bridge %s: %w", Bridge, err)
	}
	addr, err := netlink.ParseAddr(Gateway + "/24")
	if err != nil {
		return err
	}
	if err := netlink.AddrAdd(br, addr); err != nil {
		return fmt.Errorf("address %s on %s: %w", Gateway, Bridge, err)
	}
	return netlink.LinkSetUp(br)
}

func (n *Node) startContainerd(bin string) error {
	dir := filepath.Join(Root, "containerd")
	cfg := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = %[3]q
[ttrpc]
  address = "%[3]s.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[4]q
  # root here lacks CAP_SYS_RESOURCE: runc may not lower oom_score_adj.
  restrict_oom_score_adj = true
  enable_cdi = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = %[5]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[6]q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), n.containerd, PauseImage, filepath.Join(dir, "runc"), filepath.Join(Root, "cni", "net.d"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cfgPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	// ipMasq is off: pods talk only to each other and to the host on the bridge.
	cni := fmt.Sprintf(`{"cniVersion": "0.4.0", "name": "nodeconfig-realnode", "plugins": [{"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false, "hairpinMode": true, "ipam": {"type": "host-local", "ranges": [[{"subnet": %q, "gateway": %q}]], "dataDir": %q}}]}`,
		Bridge, PodSubnet, Gateway, filepath.Join(Root, "cni", "ipam"))
	if err := os.WriteFile(filepath.Join(Root, "cni", "net.d", "10-nodeconfig.conflist"), []byte(cni), 0o644); err != nil {
		return err
	}
	var err error
	if n.Containerd, err = proc.Start("containerd", bin, []string{"--config", cfgPath}, filepath.Join(n.Logs, "containerd.log")); err != nil {
		return err
	}
	return proc.WaitFor(30*time.Second, func() (bool, error) {
		if !n.Containerd.Running() {
			return false, fmt.Errorf("containerd exited: %v\n%s", n.Containerd.ExitError(), n.Containerd.Tail(2000))
		}
		out, err := n.ctr("version")
		if err != nil {
			return false, fmt.Errorf("containerd not answering: %v: %s", err, out)
		}
		return true, nil
	})
}

func (n *Node) ctr(args ...string) ([]byte, error) {
	return exec.Command("ctr", append([]string{"--address", n.containerd, "--namespace", "k8s.io"}, args...)...).CombinedOutput()
}

// ImportImage loads a docker-archive tarball into containerd's Kubernetes
// namespace, where the kubelet finds it without a registry.
func (n *Node) ImportImage(tarball string) error {
	if out, err := n.ctr("images", "import", tarball); err != nil {
		return fmt.Errorf("import %s: %v: %s", tarball, err, out)
	}
	return nil
}

// KubeletUnitDir stands for /etc/systemd/system/kubelet.service.d: the
// agent installs its start guard's drop-in there, and the kubelet's
// supervisor runs its ExecStartPre= lines before each start, as systemd
// does.
var KubeletUnitDir = filepath.Join(Root, "kubelet.service.d")

func (n *Node) startKubelet(bin string) error {
	kubeconfig := filepath.Join(Root, "kubelet.kubeconfig")
	if err := n.Cluster.ClientKubeconfig(kubeconfig, "system:node:"+NodeName, []string{"system:nodes"}); err != nil {
		return err
	}
	// A serving certificate the API server can verify (kubectl logs).
	servingCert, servingKey := filepath.Join(Root, "kubelet.crt"), filepath.Join(Root, "kubelet.key")
	if err := n.Cluster.ServingCert(servingCert, servingKey, NodeName, []net.IP{net.ParseIP(Gateway), net.ParseIP("127.0.0.1")}); err != nil {
		return err
	}
	// In the kubelet's root directory, as kubeadm puts it: the agent
	// mounts that directory to see the file replaced.
	n.KubeletConfig = filepath.Join(Root, "kubelet", "config.yaml")
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroups here are v1.
failCgroupV1: false
failSwapOn: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://%[1]s
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %[2]q}
authorization: {mode: AlwaysAllow}
readOnlyPort: 0
tlsCertFile: %[5]q
tlsPrivateKeyFile: %[6]q
healthzBindAddress: 127.0.0.1
healthzPort: 10248
podLogsDir: %[3]q
volumePluginDir: %[4]q
resolvConf: ""
syncFrequency: 10s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 50Mi, nodefs.available: 1%%, imagefs.available: 1%%, nodefs.inodesFree: 1%%}
`, n.containerd, n.Cluster.CAFile(), PodLogs, filepath.Join(Root, "volume-plugins"), servingCert, servingKey)
	if err := os.MkdirAll(filepath.Dir(n.KubeletConfig), 0o750); err != nil {
		return err
	}
	if err := os.WriteFile(n.KubeletConfig, []byte(cfg), 0o644); err != nil {
		return err
	}
	n.kubeletArgs = []string{
		"--config", n.KubeletConfig, "--config-dir", ConfigDir,
		"--kubeconfig", kubeconfig, "--root-dir", filepath.Join(Root, "kubelet"),
		"--hostname-override", NodeName, "--node-ip", Gateway,
		"--v", "1",
	}
	cgroup, _, err := kubeletCgroupDir()
	if err != nil {
		return err
	}
	if err := installKubelet(bin, cgroup); err != nil {
		return err
	}
	n.superviseKubelet = func() (*Supervisor, error) {
		p := &proc.Process{Name: "kubelet", Path: KubeletBinary, Args: slices.Clone(n.kubeletArgs), LogPath: filepath.Join(n.Logs, "kubelet.log"), Cgroup: cgroup}
		return Supervise(p, KubeletPidFile, KubeletUnitDir, filepath.Join(n.Logs, "exec-start-pre.log"))
	}
	n.Kubelet, err = n.superviseKubelet()
	return err
}

// KubeletArgs are the kubelet's arguments (after its path).
func (n *Node) KubeletArgs() []string { return slices.Clone(n.kubeletArgs) }

// RestartKubeletWith restarts the kubelet with args (after its path), as a
// person does who edits its flags (KUBELET_EXTRA_ARGS) and restarts its
// unit: SIGTERM, and its supervisor starts it again RestartDelay later,
// with them from then on (a Boot too). It returns once it has started.
func (n *Node) RestartKubeletWith(args []string) error {
	n.kubeletArgs = slices.Clone(args)
	starts := n.Kubelet.Starts()
	n.Kubelet.SetArgs(slices.Clone(args))
	if n.Kubelet.Running() {
		if err := syscall.Kill(n.Kubelet.Pid(), syscall.SIGTERM); err != nil {
			return err
		}
	}
	return proc.WaitFor(time.Minute, func() (bool, error) {
		return n.Kubelet.Starts() > starts && n.Kubelet.Running(), fmt.Errorf("the kubelet has not started again (%d starts)", n.Kubelet.Starts())
	})
}

// PowerOff stops the node as a power cut does: the kubelet and its
// supervisor, every container (their shims killed), and containerd, all
// with SIGKILL. The control plane, which is not this node's, runs on.
func (n *Node) PowerOff() error {
	n.Kubelet.Hold()
	if err := n.Kubelet.Stop(0); err != nil {
		// Killed, as meant.
		_ = err
	}
	shims, err := procsWith("containerd-shim", n.containerd)
	if err != nil {
		return err
	}
	// The containers first: a shim's death leaves them running.
	for _, pid := range descendants(shims) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, pid := range shims {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	n.Containerd.Kill()
	<-n.Containerd.Done()
	return nil
}

// Boot starts the node again after PowerOff, as a machine's boot does:
// containerd, then only the kubelet's supervisor (systemd's unit, with the
// drop-ins' ExecStartPre=): nothing else, no pod, until the kubelet starts
// them.
func (n *Node) Boot() error {
	if err := n.Containerd.Restart(); err != nil {
		return err
	}
	if err := proc.WaitFor(30*time.Second, func() (bool, error) {
		out, err := n.ctr("version")
		return err == nil, fmt.Errorf("containerd not answering: %v: %s", err, out)
	}); err != nil {
		return err
	}
	k, err := n.superviseKubelet()
	if err != nil {
		return err
	}
	n.Kubelet = k
	return nil
}

// descendants lists every process below roots, by their parents in /proc.
func descendants(roots []int) []int {
	children := map[int][]int{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, st := range stats {
		b, err := os.ReadFile(st)
		if err != nil {
			continue
		}
		// "pid (comm) state ppid ...": the fields after the last ')'.
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(st)))
		ppid, _ := strconv.Atoi(f[1])
		children[ppid] = append(children[ppid], pid)
	}
	var out []int
	queue := append([]int(nil), roots...)
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// procsWith lists the processes whose command line holds every word.
func procsWith(words ...string) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		all := true
		for _, w := range words {
			all = all && strings.Contains(string(cmd), w)
		}
		if all {
			out = append(out, pid)
		}
	}
	return out, nil
}

func (n *Node) startControllers(kcm, scheduler string) error {
	var err error
	kubeconfig := n.Cluster.Kubeconfig
	// The namespace controller finalizes a deleted namespace (the
	// uninstall's): without it the namespace stays Terminating for ever.
	n.ControllerManager, err = proc.Start("kube-controller-manager", kcm, []string{
		"--kubeconfig", kubeconfig, "--leader-elect=false",
		"--bind-address", "127.0.0.1", "--secure-port", "0",
		"--controllers", "daemonset-controller,deployment-controller,replicaset-controller,garbage-collector-controller,node-lifecycle-controller,serviceaccount-controller,root-ca-certificate-publisher-controller,disruption-controller,namespace-controller",
		"--root-ca-file", n.Cluster.CAFile(),
		"--service-account-private-key-file", n.Cluster.ServiceAccountKeyFile(),
		"--v", "1",
	}, filepath.Join(n.Logs, "kube-controller-manager.log"))
	if err != nil {
		return err
	}
	n.Scheduler, err = proc.Start("kube-scheduler", scheduler, []string{
		"--kubeconfig", kubeconfig, "--leader-elect=false",
		"--bind-address", "127.0.0.1", "--secure-port", "0",
		"--v", "1",
	}, filepath.Join(n.Logs, "kube-scheduler.log"))
	return err
}

// WaitNodeReady waits until the Node reports Ready.
func (n *Node) WaitNodeReady(ctx context.Context, timeout time.Duration) error {
	err := proc.WaitFor(timeout, func() (bool, error) {
		node, err := n.Cluster.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, fmt.Errorf("node %s: Ready=%s %s", NodeName, c.Status, c.Message)
			}
		}
		return false, fmt.Errorf("node %s has no Ready condition", NodeName)
	})
	if err != nil {
		return fmt.Errorf("%w\nkubelet log:\n%s", err, n.Kubelet.Tail(3000))
	}
	return nil
}

// KubeletHealthy reports whether the kubelet's healthz answers ok.
func KubeletHealthy() bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(KubeletHealthz)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK && strings.TrimSpace(string(body)) == "ok"
}

// Configz is the configuration the running kubelet uses, from its own
// /configz on loopback (the API server does not proxy to this node's kubelet
// port for us: the test reads it directly).
func (n *Node) Configz(ctx context.Context) (map[string]any, error) {
	if n.adminClient == nil {
		cert, key := n.Cluster.AdminCertFiles()
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, err
		}
		ca, err := os.ReadFile(n.Cluster.CAFile())
		if err != nil {
			return nil, err
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(ca)
		n.adminClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots},
		}}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://127.0.0.1:10250/configz", nil)
	if err != nil {
		return nil, err
	}
	resp, err := n.adminClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("configz: %s: %s", resp.Status, body)
	}
	var out struct {
		KubeletConfig map[string]any `json:"kubeletconfig"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, err
	}
	return out.KubeletConfig, nil
}

func (n *Node) stopProcesses() {
	if n.Scheduler != nil {
		_ = n.Scheduler.Stop(5 * time.Second)
	}
	if n.ControllerManager != nil {
		_ = n.ControllerManager.Stop(5 * time.Second)
	}
	if n.Kubelet != nil {
		_ = n.Kubelet.Stop(10 * time.Second)
	}
	if n.Containerd != nil {
		_ = n.Containerd.Stop(10 * time.Second)
	}
	if n.Cluster != nil {
		n.Cluster.Stop()
	}
}

// Stop stops every process of the node (and the pods' containers) and undoes
// every change to the host. The logs are kept in keepLogs when it is not empty.
func (n *Node) Stop(keepLogs string) error {
	n.stopProcesses()
	if keepLogs != "" {
		_ = exec.Command("cp", "-r", n.Logs, PodLogs, keepLogs).Run()
	}
	return n.host.Undo()
}

// Leftovers lists what still differs on the host from before Start.
func (n *Node) Leftovers() []string { return n.host.Leftovers() }
