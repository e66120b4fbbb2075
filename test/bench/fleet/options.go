package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"
)

// defaultSoak is the fleet NodeConfig's soak: short, so a run is short, and
// at 5,000 nodes and more shorter than the change itself.
const defaultSoak = 20 * time.Second

// options are the command's flags.
type options struct {
	nodes, selected, workers, perProcess       int
	fsync, keep, auth, coldReviews, policyCost bool
	kubeletLikeNodes, failOnFailedSync         bool
	idleWithoutStatusd, priorityAndFairness    bool
	plugin, failover                           bool
	profiles, profileFirst, maxInTrial         string
	profileFirstFor                            time.Duration
	ceiling, idle, soak, tokensDue             time.Duration
	reconcilerFlags, reconcilerEnv             []string
}

// parseFlags reads the options from the command line.
func parseFlags() options {
	var o options
	o.register(flag.CommandLine)
	flag.Parse()
	return o
}

// register defines the flags that set o on fs.
func (o *options) register(fs *flag.FlagSet) {
	fs.IntVar(&o.nodes, "nodes", 1000, "simulated nodes")
	fs.IntVar(&o.selected, "select", 0, "how many of the nodes the NodeConfig selects (0: all); the others' agents run idle beside the rollout, so a rollout of one size can be measured in clusters of others")
	fs.BoolVar(&o.idleWithoutStatusd, "idle-without-statusd", false, "with -select, the idle nodes run their checkpointd alone: no statusd, so no API connection or Node watch of theirs")
	fs.BoolVar(&o.kubeletLikeNodes, "kubelet-like-nodes", false, fmt.Sprintf("create each Node as a real kubelet reports it (labels, addresses, capacity, conditions, system info, %d images; about 20 kB of JSON): every status patch rewrites the whole object in etcd, so its size is part of a change's cost; false: a Node of its name and two labels", kubeletLikeImages))
	fs.BoolVar(&o.plugin, "plugin", false, "at the end, run the built kubectl plugin (bin/kubectl-nodeconfig) against the settled fleet: status must fit a screen and -o yaml hold what -o json does; their times are printed")
	fs.BoolVar(&o.failover, "failover", false, "run the reconciler as the install does, two instances electing a leader through a Lease (default timing), and at the end make one more change and kill the leader (SIGKILL) once half the nodes show it active: it prints the time from the kill until the standby, leading, has synced every node and every node shows the change active, against the change's")
	fs.BoolVar(&o.fsync, "fsync", false, "fsync every store commit and every config file written; all nodes share this machine's one disk, where real nodes each have their own, so off by default")
	fs.IntVar(&o.workers, "workers", 16, "the reconciler's --workers (its default)")
	fs.BoolVar(&o.keep, "keep", false, "keep the state directory")
	fs.StringVar(&o.profiles, "profile", "", "write CPU profiles of the reconciler, the API server, this process and each agent host during the config change, the reconciler's heap after it and at its highest resident set (with that moment's smaps_rollup), to this directory (this process's profile is the agents' up to -agents-per-process nodes, the harness's alone above)")
	fs.StringVar(&o.profileFirst, "profile-first", "", "write CPU profiles of the reconciler and the API server over the first rollout's first -profile-first-for, the reconciler's goroutines every 2 s of it, and its metrics after the rollout, to this directory")
	fs.DurationVar(&o.profileFirstFor, "profile-first-for", 20*time.Second, "how long -profile-first profiles the first rollout")
	fs.BoolVar(&o.auth, "auth", true, "the installed path: each agent serves TLS on a loopback address of its own and checks the reconciler's per-node token with TokenReview; false: unix sockets, no authentication")
	fs.IntVar(&o.perProcess, "agents-per-process", 3000, fmt.Sprintf("most nodes whose agents one process hosts, about %d open files each: up to this many this process hosts them all, a larger fleet is split evenly across child processes of this command", filesPerNode))
	fs.Func("reconciler-flag", "one more flag for the reconciler, e.g. -reconciler-flag=--agent-max-connections=64 (repeatable)", func(v string) error {
		o.reconcilerFlags = append(o.reconcilerFlags, v)
		return nil
	})
	fs.Func("reconciler-env", "one more environment variable for the reconciler alone, e.g. -reconciler-env=GOGC=50 (repeatable): the Go runtime's settings of the reconciler without those of the agents this command hosts", func(v string) error {
		if !strings.Contains(v, "=") {
			return fmt.Errorf("%q: want NAME=VALUE", v)
		}
		o.reconcilerEnv = append(o.reconcilerEnv, v)
		return nil
	})
	fs.StringVar(&o.maxInTrial, "max-in-trial", "100%", "the NodeConfig's spec.rollout.maxInTrial: under 100% the rollouts are paced, and the nodes it holds back wait for places")
	fs.DurationVar(&o.ceiling, "ceiling", 5*time.Second, "how long to measure the API server's Node write ceiling before the rollout (0: not measured)")
	fs.DurationVar(&o.soak, "soak", defaultSoak, "the NodeConfig's spec.soakSeconds: shorter than the change, the first nodes' promotions run during it and take their share of its CPU")
	fs.DurationVar(&o.idle, "idle", 10*time.Second, "how long to measure the CPU the settled fleet takes before the change (0: not measured)")
	fs.BoolVar(&o.priorityAndFairness, "priority-and-fairness", true, "run the API server with API Priority and Fairness, as clusters run it, and with -auth the agents in the priority level of deploy/flowcontrol.yaml; false: past 400 reads or 200 writes in flight it answers 429")
	fs.BoolVar(&o.policyCost, "policy-cost", true, "with -auth, after the write ceiling, measure the API server's CPU per Node write with the agents' admission policy bound and unbound (it matches every Node update, the kubelets' too)")
	fs.BoolVar(&o.coldReviews, "cold-reviews", true, "with -auth, the change waits until every agent's cached review of its token has expired (a minute after the last TokenReview in the audit log), as after any quiet spell, so that fleets of every size run it alike; false: it follows the first rollout's promotion and the idle measurement at once")
	fs.BoolVar(&o.failOnFailedSync, "fail-on-failed-sync", false, "exit non-zero when any of the reconciler's node syncs failed during the run (its nodeconfig_reconciler_syncs_total{queue=\"nodes\",result=\"error\"}): a smoke test, where the fleet is too small for a failure to be load")
	fs.DurationVar(&o.tokensDue, "tokens-due", 0, "the change as after a quiet hour: every node's token falls due for renewal this long after it was minted (the reconciler's --agent-token-renew-after), and the settled fleet idles that long and 5 s more before the change, past the agents' one-minute review cache too (0: the change follows the first rollout at once)")
}

// plan is the run the options describe: checked, and with what follows
// from them worked out once for every phase.
type plan struct {
	o options
	// n is the fleet's size, sel the rollout's: every figure of the
	// change is per selected node.
	n, sel int
	chosen selection
	// reporting is how many nodes run a statusd.
	reporting int
	hosted    bool // the agents run in child processes
	wait      time.Duration
}

// plan checks the options and works out the run's plan.
func (o options) plan() (plan, error) {
	n := o.nodes
	if n < 1 || o.perProcess < 1 {
		return plan{}, errors.New("-nodes and -agents-per-process must be at least 1")
	}
	if o.tokensDue > 0 {
		if !o.auth {
			return plan{}, errors.New("-tokens-due needs -auth: without authentication there are no tokens")
		}
		if o.tokensDue < time.Minute {
			return plan{}, fmt.Errorf("-tokens-due %v: at least 1m, the agents' review cache, so that every token is reviewed again", o.tokensDue)
		}
		o.reconcilerFlags = append(o.reconcilerFlags, "--agent-token-renew-after="+o.tokensDue.String())
		o.idle = max(o.idle, o.tokensDue+5*time.Second)
	}
	sel := n
	if o.selected != 0 {
		if o.selected < 1 || o.selected > n {
			return plan{}, fmt.Errorf("-select %d: it must be between 1 and -nodes (%d)", o.selected, n)
		}
		sel = o.selected
	}
	reporting := n
	if o.idleWithoutStatusd {
		reporting = sel
	}
	return plan{
		o: o, n: n, sel: sel, chosen: selection{n: n, sel: sel}, reporting: reporting,
		hosted: n > o.perProcess,
		// The waits: five minutes, more for fleets over 5,000 (10,000
		// nodes' first rollout mints and reviews 10,000 tokens).
		wait: max(5*time.Minute, time.Duration(n)*60*time.Millisecond) + o.soak,
	}, nil
}

// selection says which of a fleet's n nodes the NodeConfig selects: sel of
// them, spread evenly over the indices, so over every agent host.
type selection struct{ n, sel int }

func (s selection) selected(i int) bool { return (i+1)*s.sel/s.n > i*s.sel/s.n }

// withStatusd says which nodes run a statusd: all, or with idleWithout
// only the selected ones.
func (s selection) withStatusd(idleWithout bool) func(i int) bool {
	return func(i int) bool { return !idleWithout || s.selected(i) }
}
