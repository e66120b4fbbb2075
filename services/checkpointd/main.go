// Command checkpointd is a node's durable store of config checkpoints and
// records. See the repository README for what it does and how to poke it.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/coreos/go-systemd/v22/dbus"

	"nodeconfig.io/services/checkpointd/internal/guard"
	"nodeconfig.io/services/checkpointd/internal/kubeletfiles"
	"nodeconfig.io/services/configcheck/fieldpolicy"
	"nodeconfig.io/services/servekit"
	"nodeconfig.io/services/servekit/kubeapi"
)

func main() {
	servekit.Command{
		Name: "checkpointd", Listen: "127.0.0.1:7601", MetricsAddr: "127.0.0.1:9601",
		Usage: "Stores config checkpoints and the assigned/active/lastKnownGood/error records of one node.",
	}.Main(new(options))
}

// options are checkpointd's own flags.
type options struct {
	// The store, and the file it keeps in line with the active record.
	stateDir, targetDir, targetFile string
	kubeletConfig                   string
	// Where the kubelet's files are found without --target-dir.
	hostRoot, suggestedConfigDir string
	kube                         kubeapi.Flags // only its kubeconfig is a flag
	maxWatchers                  int
	gcInterval, gcMinAge         time.Duration
	noFsync                      bool
	// The kubelet's start guard on the host (internal/guard).
	guardUnitDir, guardHostStateDir string
	guardHostRuntimeEndpoint        string
	guardHostTargetDir              string
	guardBinaryPath                 string
	nodeFilesPeriod                 time.Duration
	drainAdmissionPolicy            string
	rules                           fieldpolicy.Rules
	consumer                        consumerFlags
	servingCert                     servingCertFlags
}

// Register implements servekit.Service.
func (o *options) Register(fs *flag.FlagSet) {
	fs.StringVar(&o.stateDir, "state-dir", "/var/lib/nodeconfig", "directory of the bbolt store (checkpoints.db)")
	fs.StringVar(&o.targetDir, "target-dir", "", "directory the active config is written to, as mounted (empty: the kubelet's --config-dir, read from its command line at start and before each activation and drift repair, and found under --host-root; the kubelet is the process --consumer-cgroup and --consumer-exe-path name, and one without --config-dir is refused)")
	fs.StringVar(&o.targetFile, "target-file", "50-nodeconfig.conf", "file name of the active config in --target-dir")
	fs.StringVar(&o.kubeletConfig, "kubelet-config", "", "the kubelet's --config file, as mounted: a kubelet drop-in is then judged merged with it and the other drop-ins of --target-dir, as the kubelet merges them at start (empty: with --target-dir judged alone over the kubelet's defaults, without it the kubelet's own --config)")
	fs.StringVar(&o.hostRoot, "host-root", "/", "without --target-dir: where the host's file system is mounted in the agent, under which the kubelet's files, named by host paths on its command line, are found (/: the agent mounts their directories at their own paths)")
	fs.StringVar(&o.suggestedConfigDir, "suggested-config-dir", "/etc/kubernetes/kubelet.conf.d", "without --target-dir: the --config-dir a kubelet without one is told to add (a host directory the agent mounts read-write)")
	fs.DurationVar(&o.nodeFilesPeriod, "kubelet-files-period", 10*time.Second, "with --kubelet-config, or the kubelet's files found: how often the node's own kubelet files (the --config file, the other drop-ins) are checked for a change, after which the active drop-in is judged against them again and rolled back if it no longer validates (0: never)")
	o.rules.Register(fs)
	fs.StringVar(&o.drainAdmissionPolicy, "drain-admission-policy", "", "the ValidatingAdmissionPolicy (with its binding of the same name) that holds this agent's Node patch to spec.unschedulable of its own Node: a drain cordons the node only once it sees it installed and enforced, and fails naming what is missing otherwise (deploy/rbac.yaml: nodeconfig-agent-own-node); empty: no check")
	fs.IntVar(&o.maxWatchers, "max-watchers", 64, "most concurrent WatchRecords streams")
	fs.DurationVar(&o.gcInterval, "gc-interval", 10*time.Minute, "how often unreferenced checkpoints are swept")
	fs.DurationVar(&o.gcMinAge, "gc-min-age", time.Hour, "an unreferenced checkpoint younger than this is kept (it may be about to be assigned)")
	fs.StringVar(&o.kube.Kubeconfig, "kubeconfig", "", "kubeconfig for TokenReview with --auth=token; empty means in-cluster config")
	fs.StringVar(&o.guardUnitDir, "guard-unit-dir", "", "the kubelet unit's drop-in directory as mounted (/etc/systemd/system/kubelet.service.d): the agent installs the guard (--guard-binary) under --state-dir/bin and a drop-in there that runs it before each kubelet start, so that a kubelet that cannot start on a config gets last-known-good back with no pod running (empty: not installed)")
	fs.StringVar(&o.guardBinaryPath, "guard-binary", "", "the start guard's binary to install (empty: nodeconfig-guard beside this executable)")
	fs.StringVar(&o.guardHostRuntimeEndpoint, "guard-host-runtime-endpoint", "", "the container runtime's socket as the host sees it, for the start guard, which counts no kubelet start while it is down (empty: --consumer-runtime-endpoint)")
	fs.StringVar(&o.guardHostTargetDir, "guard-host-target-dir", "", "with --target-dir: --target-dir as the host sees it, where the mount puts it elsewhere: the start guard writes there (empty: --target-dir; without --target-dir the kubelet's own --config-dir is the host's path)")
	fs.StringVar(&o.guardHostStateDir, "guard-host-state-dir", "", "--state-dir as the host sees it, where the mount puts it elsewhere: the drop-in names host paths (empty: --state-dir)")
	fs.BoolVar(&o.noFsync, "unsafe-no-fsync", false, "skip fsync of the store and of the config file it writes (tests and benchmarks only: a crash of the machine can lose writes)")
	o.consumer.register(fs)
	o.servingCert.register(fs)
}

// guardDir is where the kubelet's host-side start guard finds the trial:
// beside the store, where the node gates on its consumer (the kubelet).
func (o *options) guardDir(gated bool) string {
	if !gated {
		return ""
	}
	return filepath.Join(o.stateDir, "guard")
}

// guardBinaryName is the start guard's binary, beside checkpointd's in its
// image and in ./bin.
const guardBinaryName = "nodeconfig-guard"

// guardBinary is the guard binary to install: --guard-binary, else the one
// beside this executable.
func (o *options) guardBinary() (string, error) {
	if o.guardBinaryPath != "" {
		return o.guardBinaryPath, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(self), guardBinaryName), nil
}

// installGuard puts the start guard on the host where the flags ask and the
// node gates on its kubelet. A failure is logged, not fatal: the agent's
// own gate still judges the kubelet while it runs.
func (o *options) installGuard(log *slog.Logger, gated bool) {
	if !gated || o.guardUnitDir == "" {
		return
	}
	src, err := o.guardBinary()
	if err != nil {
		log.Error("cannot install the kubelet's start guard: no path to its binary", "err", err)
		return
	}
	host := o.guardHostStateDir
	if host == "" {
		host = o.stateDir
	}
	bin := filepath.Join("bin", guardBinaryName)
	changed, err := guard.Install(src, filepath.Join(o.stateDir, bin), filepath.Join(host, bin), filepath.Join(host, "guard"), o.guardUnitDir)
	if err != nil {
		log.Error("cannot install the kubelet's start guard", "err", err)
		return
	}
	if len(changed) == 0 {
		return
	}
	log.Info("installed the kubelet's start guard", "changed", changed)
	// systemd reads a new drop-in at a daemon-reload or at boot, when the
	// guard matters most; the reload is asked where the system bus is
	// mounted.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := dbus.NewSystemConnectionContext(ctx)
	if err == nil {
		defer conn.Close()
		err = conn.ReloadContext(ctx)
	}
	if err != nil {
		log.Info("systemd reads the start guard's drop-in at its next daemon-reload or boot", "reload", err)
	}
}

// guardRuntimeEndpoint is the runtime's socket the start guard checks, as
// the host sees it.
func (o *options) guardRuntimeEndpoint() string {
	if o.guardHostRuntimeEndpoint != "" {
		return o.guardHostRuntimeEndpoint
	}
	return o.consumer.runtimeEndpoint
}

// locateKubelet is how the node finds the kubelet's files: nil where
// --target-dir names them, else read from the kubelet's command line.
func (o *options) locateKubelet() (func() (kubeletfiles.Located, error), error) {
	if o.targetDir != "" {
		return nil, nil
	}
	s, err := o.consumer.signal("with no --target-dir, the agent reads the kubelet's --config-dir off its command line: it")
	if err != nil {
		return nil, err
	}
	if !filepath.IsAbs(o.hostRoot) || !filepath.IsAbs(o.suggestedConfigDir) {
		return nil, fmt.Errorf("--host-root %q and --suggested-config-dir %q must be absolute paths", o.hostRoot, o.suggestedConfigDir)
	}
	l := kubeletfiles.Locator{Pid: s.Pid, Proc: o.consumer.proc, HostRoot: o.hostRoot, SuggestedConfigDir: o.suggestedConfigDir, Config: o.kubeletConfig}
	return l.Locate, nil
}
