package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/procfs"

	"nodeconfig.io/services/servekit/authn"
	"nodeconfig.io/test/framework/audit"
)

// callTimes are when the API server received calls of one kind, in the
// audit log's order.
type callTimes []time.Time

// changeCalls are when the API server received the calls a change is made
// of, read in one pass over the audit log: the reconciler's TokenRequests
// (its tokens for the agents, minted or renewed), the agents' TokenReviews
// of them, and the agents' Node status patches with their own tokens, each
// answered (created, or patched); and the requests of nodeconfig's clients
// it refused as too many (429), which they retry.
type changeCalls struct{ tokenRequests, tokenReviews, agentPatches, refused callTimes }

func readCalls(auditLog string) (changeCalls, error) {
	var c changeCalls
	err := audit.Each(auditLog, func(e audit.Event) {
		created, patched := e.Verb == "create" && e.ResponseStatus.Code == http.StatusCreated, e.Verb == "patch" && e.ResponseStatus.Code == http.StatusOK
		switch {
		case e.ResponseStatus.Code == http.StatusTooManyRequests && e.Nodeconfigs():
			c.refused = append(c.refused, e.RequestReceived)
		case created && e.IsTokenRequest() && e.ObjectRef.Name == reconcilerAccount:
			c.tokenRequests = append(c.tokenRequests, e.RequestReceived)
		case created && e.ObjectRef.Resource == "tokenreviews":
			c.tokenReviews = append(c.tokenReviews, e.RequestReceived)
		case patched && e.ObjectRef.Resource == "nodes" && e.ObjectRef.Subresource == "status" && e.User.Username == statusUser:
			c.agentPatches = append(c.agentPatches, e.RequestReceived)
		}
	})
	return c, err
}

// between counts the calls from from to to.
func (r callTimes) between(from, to time.Time) int {
	n := 0
	for _, t := range r {
		if !t.Before(from) && !t.After(to) {
			n++
		}
	}
	return n
}

// cachedUntil is, for reviews, when the last one's answer leaves its
// agent's cache: a change after it finds every agent reviewing its token
// again.
func (r callTimes) cachedUntil() time.Time {
	var last time.Time
	for _, t := range r {
		if t.After(last) {
			last = t
		}
	}
	return last.Add(authn.ReviewCacheTTL)
}

// settledWrites counts nodeconfig's API writes, lease renewals aside, once
// they have stopped coming (the e2e tests' wait, audit.Settle quiet).
func settledWrites(l *audit.Log) (int, error) {
	w, err := l.Settled(audit.Settle, 2*time.Minute)
	return w.Total(), err
}

// resident is a process's resident set in KiB: its peak, now, and now's
// anonymous memory and pages of files (its binary's, mostly).
type resident struct{ peak, rss, anon, file int64 }

func memory(pid int) (resident, error) {
	proc, err := procfs.NewProc(pid)
	if err != nil {
		return resident{}, err
	}
	st, err := proc.NewStatus()
	if err != nil {
		return resident{}, err
	}
	return resident{peak: int64(st.VmHWM >> 10), rss: int64(st.VmRSS >> 10), anon: int64(st.RssAnon >> 10), file: int64(st.RssFile >> 10)}, nil
}

// runtimeMemory summarises the Go runtime's memory gauges of a /metrics page:
// with the heap in use, the next collection's goal and GOGC, its headroom.
func runtimeMemory(page []byte) string {
	families, err := parseMetrics(page)
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, name := range []string{"go_goroutines", "go_memstats_heap_inuse_bytes", "go_memstats_heap_idle_bytes",
		"go_memstats_heap_released_bytes", "go_memstats_stack_inuse_bytes", "go_memstats_sys_bytes", "go_memstats_next_gc_bytes", "go_gc_gogc_percent"} {
		if f, ok := families[name]; ok && len(f.GetMetric()) == 1 {
			v, unit := f.GetMetric()[0].GetGauge().GetValue(), ""
			if strings.HasSuffix(name, "_bytes") {
				v, unit = v/(1<<20), " MiB"
			}
			parts = append(parts, fmt.Sprintf("%s %.0f%s", strings.TrimPrefix(strings.TrimPrefix(name, "go_memstats_"), "go_gc_"), v, unit))
		}
	}
	return strings.Join(parts, ", ")
}

// syncCounts are the reconciler's syncs so far (a node sync asks the
// node's agent, a NodeConfig sync counts its selected nodes' states; the
// failed node syncs are retried with backoff, a rollout's stragglers; the
// waiting ones asked no agent, their ConfigMap not listed yet), and its
// TokenRequests for the agents' tokens: on a call's path, renewed ahead in
// the background, minted by a new leader before its first pass, and
// minted while standing by.
type syncCounts struct {
	nodes, nodesFailed, nodesWaited, nodeConfigs, tokensOnUse, tokensAhead, tokensPrefetched, tokensStandby float64
}

// since is what was counted after before.
func (s syncCounts) since(before syncCounts) syncCounts {
	return syncCounts{
		nodes: s.nodes - before.nodes, nodesFailed: s.nodesFailed - before.nodesFailed, nodesWaited: s.nodesWaited - before.nodesWaited,
		nodeConfigs: s.nodeConfigs - before.nodeConfigs, tokensOnUse: s.tokensOnUse - before.tokensOnUse, tokensAhead: s.tokensAhead - before.tokensAhead,
		tokensPrefetched: s.tokensPrefetched - before.tokensPrefetched, tokensStandby: s.tokensStandby - before.tokensStandby,
	}
}

// outcomes says how the node syncs that did not simply succeed ended.
func (s syncCounts) outcomes() string {
	return fmt.Sprintf("%.0f failed and retried with backoff, %.0f waited for their ConfigMap's first listing", s.nodesFailed, s.nodesWaited)
}

// noneFailed is an error when a node sync failed: the run's outcome, not
// its speed, so it holds however loaded the machine is.
func (s syncCounts) noneFailed() error {
	if s.nodes == 0 {
		// A renamed series would read as no failure at all.
		return errors.New("the reconciler's /metrics counts no node sync: nodeconfig_reconciler_syncs_total{queue=\"nodes\"} is missing")
	}
	if s.nodesFailed > 0 {
		return fmt.Errorf("%.0f of the reconciler's %.0f node syncs failed during the run (its log says why)", s.nodesFailed, s.nodes)
	}
	return nil
}

func readSyncs(metricsAddr string) (syncCounts, error) {
	page, err := fetch("http://" + metricsAddr + "/metrics")
	if err != nil {
		return syncCounts{}, err
	}
	return parseSyncs(page)
}

// parseSyncs reads syncCounts from the reconciler's /metrics page.
func parseSyncs(page []byte) (syncCounts, error) {
	var n syncCounts
	families, err := parseMetrics(page)
	if err != nil {
		return n, err
	}
	for _, m := range families["nodeconfig_agent_token_requests_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			switch {
			case l.GetName() != "when":
			case l.GetValue() == "on_use":
				n.tokensOnUse += m.GetCounter().GetValue()
			case l.GetValue() == "ahead":
				n.tokensAhead += m.GetCounter().GetValue()
			case l.GetValue() == "prefetch":
				n.tokensPrefetched += m.GetCounter().GetValue()
			case l.GetValue() == "standby":
				n.tokensStandby += m.GetCounter().GetValue()
			}
		}
	}
	for _, m := range families["nodeconfig_reconciler_syncs_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		v := m.GetCounter().GetValue()
		switch labels["queue"] {
		case "nodes":
			n.nodes += v
			switch labels["result"] {
			case "error":
				n.nodesFailed += v
			case "waiting":
				n.nodesWaited += v
			}
		case "nodeconfigs":
			n.nodeConfigs += v
		}
	}
	return n, nil
}

// parseMetrics reads a /metrics page in Prometheus's text format.
func parseMetrics(page []byte) (map[string]*dto.MetricFamily, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(bytes.NewReader(page))
}

func fetch(url string) ([]byte, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// openFiles counts the open files of the processes a fleet is limited by.
func openFiles(reconciler, apiServer int, hosts *agentHosts) string {
	count := func(pid int) string {
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			return "?"
		}
		return strconv.Itoa(len(fds))
	}
	parts := []string{"this process " + count(os.Getpid())}
	if hosts != nil {
		var h []string
		for _, pid := range hosts.pids() {
			h = append(h, count(pid))
		}
		parts = append(parts, "agent hosts "+strings.Join(h, ", "))
	}
	parts = append(parts, "reconciler "+count(reconciler), "kube-apiserver "+count(apiServer))
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil {
		parts = append(parts, fmt.Sprintf("limit %d", lim.Cur))
	}
	return strings.Join(parts, "; ")
}
