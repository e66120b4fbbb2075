package main

import (
	"flag"
	"log/slog"
	"strings"
	"testing"
)

// A signal restarter finds the kubelet by its cgroup and executable or by a
// pid file, never by its name alone: the agent refuses to start without.
func TestSignalNeedsTheKubeletsCgroupAndExecutable(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		refused string // "" for accepted
	}{
		{[]string{}, "--consumer-cgroup and --consumer-exe-path"},
		{[]string{"--consumer-cgroup=/system.slice/kubelet.service"}, "--consumer-cgroup and --consumer-exe-path"},
		{[]string{"--consumer-exe-path=/usr/bin/kubelet"}, "--consumer-cgroup and --consumer-exe-path"},
		{[]string{"--consumer-cgroup=/", "--consumer-exe-path=/usr/bin/kubelet"}, "below the root cgroup"},
		{[]string{"--consumer-cgroup=system.slice/kubelet.service", "--consumer-exe-path=/usr/bin/kubelet"}, "absolute"},
		{[]string{"--consumer-cgroup=/system.slice/../kubelet.service", "--consumer-exe-path=/usr/bin/kubelet"}, "clean"},
		{[]string{"--consumer-cgroup=/system.slice/kubelet.service", "--consumer-exe-path=kubelet"}, "absolute"},
		{[]string{"--consumer-cgroup=/system.slice/kubelet.service", "--consumer-exe-path=/usr/bin/kubelet"}, ""},
		{[]string{"--consumer-pid-file=/run/kubelet.pid"}, ""},
	} {
		var c consumerFlags
		fs := flag.NewFlagSet("checkpointd", flag.ContinueOnError)
		c.register(fs)
		if err := fs.Parse(append([]string{"--consumer-restart=signal"}, tc.args...)); err != nil {
			t.Fatal(err)
		}
		g, err := c.gate(slog.New(slog.DiscardHandler))
		switch {
		case tc.refused == "" && (err != nil || g == nil):
			t.Errorf("%v: %v; want a gate", tc.args, err)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
			t.Errorf("%v: %v; want it refused for %q", tc.args, err, tc.refused)
		}
	}
}

// With no --target-dir the agent reads the kubelet's files off its command
// line, and so needs to find the kubelet as a signal does; --target-dir
// names them and nothing is read.
func TestFindingTheKubeletsFilesNeedsTheKubelet(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		locates bool
		refused string // "" for accepted
	}{
		{[]string{"--target-dir=/etc/kubernetes/kubelet.conf.d"}, false, ""},
		{[]string{}, false, "with no --target-dir, the agent reads the kubelet's --config-dir off its command line: it finds the consumer by --consumer-cgroup and --consumer-exe-path"},
		{[]string{"--consumer-exe-path=/usr/bin/kubelet"}, false, "--consumer-cgroup and --consumer-exe-path"},
		{[]string{"--consumer-cgroup=/system.slice/kubelet.service", "--consumer-exe-path=/usr/bin/kubelet"}, true, ""},
		{[]string{"--consumer-pid-file=/run/kubelet.pid"}, true, ""},
		{[]string{"--consumer-pid-file=/run/kubelet.pid", "--host-root=host"}, false, "must be absolute"},
	} {
		var o options
		fs := flag.NewFlagSet("checkpointd", flag.ContinueOnError)
		o.Register(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		loc, err := o.locateKubelet()
		switch {
		case tc.refused == "" && (err != nil || (loc != nil) != tc.locates):
			t.Errorf("%v: locates %v, %v; want locates %v", tc.args, loc != nil, err, tc.locates)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
			t.Errorf("%v: %v; want it refused for %q", tc.args, err, tc.refused)
		}
	}
}

// The kubelet's root directory: --kubelet-root-dir where given, else read
// off the kubelet's command line, else (--target-dir names the kubelet's
// files, nothing is read) the kubelet's default.
func TestTheKubeletsRootDirIsItsOwnUnlessNamed(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		named   string
		locates bool
	}{
		{[]string{"--kubelet-root-dir=/data/kubelet", "--consumer-pid-file=/run/kubelet.pid"}, "/data/kubelet", false},
		{[]string{"--consumer-pid-file=/run/kubelet.pid"}, "", true},
		{[]string{"--consumer-pid-file=/run/kubelet.pid", "--target-dir=/etc/kubernetes/kubelet.conf.d"}, "/var/lib/kubelet", false},
	} {
		var o options
		fs := flag.NewFlagSet("checkpointd", flag.ContinueOnError)
		o.Register(fs)
		if err := fs.Parse(append([]string{"--consumer-restart=signal"}, tc.args...)); err != nil {
			t.Fatal(err)
		}
		g, err := o.consumer.gate(slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		loc, err := o.locateKubelet()
		if err != nil {
			t.Fatal(err)
		}
		findKubeletRootDir(g, loc)
		if g.KubeletRootDir != tc.named || (g.LocateKubeletRootDir != nil) != tc.locates {
			t.Errorf("%v: root dir %q, located %v; want %q, located %v", tc.args, g.KubeletRootDir, g.LocateKubeletRootDir != nil, tc.named, tc.locates)
		}
	}
}
