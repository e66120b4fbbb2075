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
