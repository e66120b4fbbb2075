package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"path"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"nodeconfig.io/services/checkpointd/internal/consumer"
	"nodeconfig.io/services/checkpointd/internal/nodehealth"
)

// consumerFlags say how this node's consumer of the file (the kubelet) is
// restarted and probed: the node's own facts, so they are agent flags.
type consumerFlags struct {
	restart, pidFile, cgroup, exePath, proc, unit, healthURL, logFile, runtimeEndpoint string
	kubeletRootDir                                                                     string
	healthTimeout, period                                                              time.Duration
	failures                                                                           int
	healthGates                                                                        bool
	podsReadyTimeout                                                                   time.Duration
}

func (c *consumerFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.restart, "consumer-restart", "none", "how the consumer picks up a new file: none (it rereads the file itself; no health gate), signal (SIGTERM to it, its babysitter starts it again) or systemd (restart --consumer-unit over the system bus)")
	fs.StringVar(&c.pidFile, "consumer-pid-file", "", "signal, and finding the kubelet's files: the consumer's pid file")
	fs.StringVar(&c.cgroup, "consumer-cgroup", "", "signal, and finding the kubelet's files (no --target-dir): the consumer's cgroup as /proc/<pid>/cgroup shows it on the host, on any hierarchy (kubeadm's kubelet: /system.slice/kubelet.service); only a process in it is the consumer, which no pod can pose as; needed without --consumer-pid-file")
	fs.StringVar(&c.exePath, "consumer-exe-path", "", "signal, and finding the kubelet's files: the consumer's executable as its unit starts it (ExecStart's path; kubeadm's kubelet: /usr/bin/kubelet), which tells it from the helpers it runs in its cgroup; needed without --consumer-pid-file")
	fs.StringVar(&c.proc, "consumer-proc", "/proc", "signal, and finding the kubelet's files: the host's /proc (the agent runs with hostPID)")
	fs.StringVar(&c.unit, "consumer-unit", "kubelet.service", "systemd: the consumer's unit")
	fs.StringVar(&c.healthURL, "consumer-health-url", "http://127.0.0.1:10248/healthz", "the consumer's health endpoint (2xx = healthy); empty: no probe")
	fs.StringVar(&c.logFile, "consumer-log-file", "", "the consumer's log file, if it writes one: its last error line (the kubelet's exit line) goes into the message of a rollback")
	fs.DurationVar(&c.healthTimeout, "consumer-health-timeout", 2*time.Minute, "how long a restarted consumer has to become healthy before its config is rolled back")
	fs.DurationVar(&c.period, "consumer-probe-period", 5*time.Second, "how often the consumer is probed through the soak")
	fs.IntVar(&c.failures, "consumer-failure-threshold", 3, "failed probes in a row that make a healthy consumer unhealthy (and its config rolled back)")
	fs.BoolVar(&c.healthGates, "health-gates", true, "with a consumer gate and --node-name: judge the node through each soak beyond the kubelet's healthz (its Node stays Ready and free of memory, disk and PID pressure; its pods Ready before the trial are Ready again within --health-pods-ready-timeout), roll back what fails, and hold the soak while the API server cannot be read")
	fs.DurationVar(&c.podsReadyTimeout, "health-pods-ready-timeout", 3*time.Minute, "with --health-gates: how long after the kubelet's restart the node's pods that were Ready before it have to be Ready again")
	fs.StringVar(&c.kubeletRootDir, "kubelet-root-dir", "/var/lib/kubelet", "the kubelet's --root-dir as mounted (writable): a change its state files refuse (the CPU or memory manager's policy: docs/disruption.md) has them removed there while the kubelet is down")
	fs.StringVar(&c.runtimeEndpoint, "consumer-runtime-endpoint", "", "the container runtime's CRI socket, as the kubelet's --container-runtime-endpoint (e.g. unix:///run/containerd/containerd.sock; mount it into the agent): before a failing consumer's config is rolled back the runtime is asked, and while it is not ready the node holds and blames nothing; empty: no check")
}

// gate builds the consumer gate the flags describe; nil for none.
func (c *consumerFlags) gate(log *slog.Logger) (*consumer.Gate, error) {
	var r consumer.Restarter
	switch c.restart {
	case "none":
		return nil, nil
	case "signal":
		s, err := c.signal("--consumer-restart=signal")
		if err != nil {
			return nil, err
		}
		r = s
	case "systemd":
		r = consumer.Systemd{Unit: c.unit}
	default:
		return nil, fmt.Errorf("--consumer-restart %q: want none, signal or systemd", c.restart)
	}
	if c.healthTimeout <= 0 || c.period <= 0 || c.failures < 1 || c.podsReadyTimeout <= 0 {
		return nil, fmt.Errorf("--consumer-health-timeout, --consumer-probe-period and --health-pods-ready-timeout must be positive and --consumer-failure-threshold at least 1")
	}
	var rt consumer.Runtime
	if c.runtimeEndpoint != "" {
		if _, err := consumer.ParseCRIEndpoint(c.runtimeEndpoint); err != nil {
			return nil, fmt.Errorf("--consumer-runtime-endpoint: %w", err)
		}
		rt = consumer.CRI{Endpoint: c.runtimeEndpoint}
	}
	return consumer.NewGate(consumer.Gate{
		Restarter: r, Prober: consumer.Prober{URL: c.healthURL}, Runtime: rt,
		HealthTimeout: c.healthTimeout, Period: c.period, FailureThreshold: c.failures, LogFile: c.logFile, KubeletRootDir: c.kubeletRootDir, Log: log,
	}), nil
}

// signal is how the consumer's process is found, for what (a signal
// restarter, or reading the kubelet's command line). It refuses to find
// it by less than its cgroup and executable: by name alone, any pod could
// pose as it (be signalled, hold its restart, fake its crash loop, or say
// where the agent writes).
func (c *consumerFlags) signal(what string) (consumer.Signal, error) {
	if c.pidFile == "" && (c.cgroup == "" || c.exePath == "") {
		return consumer.Signal{}, fmt.Errorf("%s finds the consumer by --consumer-cgroup and --consumer-exe-path (kubeadm's kubelet: /system.slice/kubelet.service and /usr/bin/kubelet), or names it by --consumer-pid-file: set them", what)
	}
	if c.cgroup != "" && (!path.IsAbs(c.cgroup) || path.Clean(c.cgroup) != c.cgroup || c.cgroup == "/") {
		return consumer.Signal{}, fmt.Errorf("--consumer-cgroup %q: want a clean absolute path below the root cgroup, as /proc/<pid>/cgroup shows it", c.cgroup)
	}
	if c.exePath != "" && !path.IsAbs(c.exePath) {
		return consumer.Signal{}, fmt.Errorf("--consumer-exe-path %q: want the executable's absolute path", c.exePath)
	}
	return consumer.Signal{PidFile: c.pidFile, Cgroup: c.cgroup, ExePath: c.exePath, Proc: c.proc}, nil
}

// startHealth starts the node's health gate (internal/nodehealth), reading
// this node's Node and pods with restCfg's identity.
func (c *consumerFlags) startHealth(ctx context.Context, restCfg *rest.Config, node string, log *slog.Logger) (consumer.Health, error) {
	cfg := rest.CopyConfig(restCfg)
	// Watches outlive any client timeout.
	cfg.Timeout = 0
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return nodehealth.Start(ctx, nodehealth.Options{Kube: kube, Node: node, PodsReadyTimeout: c.podsReadyTimeout, Log: log})
}
