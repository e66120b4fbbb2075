package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/prometheus/procfs"
)

// cpuUse is what each part of the run spent: the simulated nodes' agents
// with this harness, the API server, etcd and the reconciler. On a real
// fleet each node's agents run on that node; here every part shares this
// machine's cores, so a change cannot finish before the CPU it takes is
// spread over them: that is its CPU floor.
type cpuUse struct {
	// cpu is each part's CPU time (user and system, seconds); system is
	// the kernel's share of it and faults the minor page faults (first
	// touches of memory the process was given or had returned), the costs
	// a process's memory size can drive.
	cpu, system, faults [parts]float64
	// harness is this process's share of the agents' when they run in
	// hosts of their own (-1 when it hosts them too): the measuring, which
	// a real fleet does not pay.
	harness float64
}

// cpuPids are the processes whose CPU time cpuUse sums.
type cpuPids struct {
	agents                      []int // this process and the agent hosts
	apiServer, etcd, reconciler int
}

// The parts, as cpuUse indexes them.
const (
	partAgents = iota
	partAPIServer
	partEtcd
	partReconciler
	parts
)

var partNames = [parts]string{"agents and harness", "API server", "etcd", "reconciler"}

// userHZ is the clock tick of /proc's times, as procfs's CPUTime takes it.
const userHZ = 100

// readCPU reads each process's /proc stat once.
func readCPU(p cpuPids) (cpuUse, error) {
	u := cpuUse{harness: -1}
	for part, pids := range [parts][]int{p.agents, {p.apiServer}, {p.etcd}, {p.reconciler}} {
		for _, pid := range pids {
			st, err := procStat(pid)
			if err != nil {
				return u, err
			}
			u.cpu[part] += st.CPUTime()
			u.system[part] += float64(st.STime) / userHZ
			u.faults[part] += float64(st.MinFlt)
			if pid == os.Getpid() && len(p.agents) > 1 {
				u.harness = st.CPUTime()
			}
		}
	}
	return u, nil
}

// procStat reads a process's /proc stat: its CPU times and page faults.
func procStat(pid int) (procfs.ProcStat, error) {
	proc, err := procfs.NewProc(pid)
	if err != nil {
		return procfs.ProcStat{}, err
	}
	st, err := proc.Stat()
	if err != nil {
		return procfs.ProcStat{}, fmt.Errorf("CPU time of process %d: %w", pid, err)
	}
	return st, nil
}

func (u cpuUse) minus(before cpuUse) cpuUse {
	for i := range parts {
		u.cpu[i] -= before.cpu[i]
		u.system[i] -= before.system[i]
		u.faults[i] -= before.faults[i]
	}
	if u.harness >= 0 && before.harness >= 0 {
		u.harness -= before.harness
	} else {
		u.harness = -1
	}
	return u
}

func (u cpuUse) agents() float64       { return u.cpu[partAgents] }
func (u cpuUse) controlPlane() float64 { return u.total() - u.agents() }

func (u cpuUse) total() float64 {
	var t float64
	for _, s := range u.cpu {
		t += s
	}
	return t
}

// floor is the time the CPU taken needs on this machine's cores.
func (u cpuUse) floor() float64 { return u.total() / float64(runtime.NumCPU()) }

// controlPlaneFloor is the time the control plane's CPU alone needs on
// these cores: the floor of a fleet whose agents run on their own nodes'
// CPUs, as real ones do.
func (u cpuUse) controlPlaneFloor() float64 { return u.controlPlane() / float64(runtime.NumCPU()) }

func (u cpuUse) String() string {
	harness := ""
	if u.harness >= 0 {
		harness = fmt.Sprintf(" (this harness %.1f s of it)", u.harness)
	}
	return fmt.Sprintf("agents and harness %.1f s%s, API server %.1f s, etcd %.1f s, reconciler %.1f s: %.1f s on %d cores, at least %.2f s",
		u.cpu[partAgents], harness, u.cpu[partAPIServer], u.cpu[partEtcd], u.cpu[partReconciler], u.total(), runtime.NumCPU(), u.floor())
}

// kernel says, per part, the kernel's share and the minor page faults.
func (u cpuUse) kernel() string {
	var out []string
	for i, name := range partNames {
		out = append(out, fmt.Sprintf("%s %.1f s, %.0f faults", name, u.system[i], u.faults[i]))
	}
	return strings.Join(out, "; ")
}

func fleetPids(hosts *agentHosts, apiServer, etcd, reconciler int) cpuPids {
	agents := []int{os.Getpid()}
	if hosts != nil {
		agents = append(agents, hosts.pids()...)
	}
	return cpuPids{agents: agents, apiServer: apiServer, etcd: etcd, reconciler: reconciler}
}

// idleCPU is the CPU each part takes per second of d while nothing
// changes, with this process's CPU profile written to profile (if named).
func idleCPU(ctx context.Context, p cpuPids, d time.Duration, profile string) (idleUse, error) {
	if profile != "" {
		stop, err := startCPUProfile(profile)
		if err != nil {
			return idleUse{}, err
		}
		defer stop()
	}
	before, err := readCPU(p)
	if err != nil {
		return idleUse{}, err
	}
	select {
	case <-ctx.Done():
		return idleUse{}, context.Cause(ctx)
	case <-time.After(d):
	}
	after, err := readCPU(p)
	if err != nil {
		return idleUse{}, err
	}
	return idleUse{after.minus(before), d.Seconds()}, nil
}

type idleUse struct {
	cpuUse
	seconds float64
}

func (u idleUse) String() string {
	per := func(v float64) float64 { return v / u.seconds }
	return fmt.Sprintf("agents and harness %.2f s, API server %.2f s, etcd %.2f s, reconciler %.2f s",
		per(u.cpu[partAgents]), per(u.cpu[partAPIServer]), per(u.cpu[partEtcd]), per(u.cpu[partReconciler]))
}

// startCPUProfile profiles this process into path (its directory made if
// missing) until stop.
func startCPUProfile(path string) (stop func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	out, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(out); err != nil {
		_ = out.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		_ = out.Close()
	}, nil
}
