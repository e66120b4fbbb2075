package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/test/framework/proc"
)

// A config that stays active through its soak becomes last-known-good on
// the node's own records even when its ConfigMap is deleted during the
// soak, as the kubelet did: the condition's "on trial until" comes true,
// and a later bad version rolls back to it, not to the one before.
func TestActiveConfigIsPromotedAfterItsConfigMapIsDeleted(t *testing.T) {
	const soak = 2 * time.Second
	e, n, _ := newPromotedNode(t, soak)
	v2 := e.configMap("cfg", map[string]string{"config.yaml": "maxPods: 90\n"})
	e.waitNode(n.Name, 20*time.Second, "v2 soaking", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.Active) == v2.ResourceVersion && reasonIs(c, "Soaking")
	})
	if err := e.c.Client.CoreV1().ConfigMaps(e.ns).Delete(e.ctx, "cfg", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := proc.WaitFor(20*time.Second, func() (bool, error) {
		return e.records(0).GetLastKnownGood().GetSource().GetResourceVersion() == v2.ResourceVersion, nil
	}); err != nil {
		t.Fatalf("v2 stayed active through its soak but was never promoted: %v (records %v)", err, e.records(0))
	}
	r := e.records(0)
	if promoted, soakEnd := r.GetLastKnownGood().GetWrittenAt().AsTime(), r.GetActive().GetWrittenAt().AsTime().Add(soak); promoted.Before(soakEnd) {
		t.Fatalf("promoted at %v, before the soak ended at %v", promoted, soakEnd)
	}
	e.waitNode(n.Name, 20*time.Second, "the missing ConfigMap reported, v2 in use", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.LastKnownGood) == v2.ResourceVersion && reasonIs(c, "DownloadFailed") && strings.Contains(c.Message, "resourceVersion "+v2.ResourceVersion)
	})

	// The ConfigMap comes back bad: the rollback goes to v2.
	bad := e.configMap("cfg", map[string]string{"config.yaml": badYAML})
	e.waitNode(n.Name, 20*time.Second, "rolled back to v2", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.Assigned) == bad.ResourceVersion && rv(st.Active) == v2.ResourceVersion && reasonIs(c, "RolledBack")
	})
	if got, _ := n.Target(); got != "maxPods: 90\n" {
		t.Fatalf("target = %q, want v2's", got)
	}
}

// The same when the NodeConfig is abandoned (deletion-policy: abandon,
// then deleted) while the node soaks: the node keeps its config and its
// soak, the config becomes last-known-good on the node's own records when
// the soak ends, and the condition never claims a trial that ended. A
// later bad version rolls back to it.
func TestActiveConfigIsPromotedAfterItsNodeConfigIsAbandoned(t *testing.T) {
	const soak = 6 * time.Second
	e := newEnv(t, 1)
	n := e.nodes[0]
	abandon := map[string]string{v1alpha1.AnnotationDeletionPolicy: "abandon"}
	src := map[string]any{"configMap": map[string]any{"namespace": e.ns, "name": "cfg", "key": "config.yaml"}}
	v1 := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.nodeConfig(e.label, map[string]any{"source": src, "soakSeconds": int64(1)}, abandon)
	e.waitNode(n.Name, 20*time.Second, "v1 promoted", func(st corev1.NodeConfigStatus, _ *corev1.NodeCondition) bool {
		return rv(st.LastKnownGood) == v1.ResourceVersion
	})
	// The longer soak first (v1 is last-known-good: no trial), so that v2
	// is assigned with it.
	e.setSpec(map[string]any{"soakSeconds": int64(soak / time.Second)})
	if err := proc.WaitFor(20*time.Second, func() (bool, error) {
		return e.records(0).GetAssigned().GetSoakSeconds() == int64(soak/time.Second), nil
	}); err != nil {
		t.Fatalf("the %v soak never reached the node: %v", soak, err)
	}
	stop := e.watchSoakClaims(3*time.Second, n.Name)
	defer stop()

	v2 := e.configMap("cfg", map[string]string{"config.yaml": "maxPods: 90\n"})
	e.waitNode(n.Name, 20*time.Second, "v2 soaking", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.Active) == v2.ResourceVersion && reasonIs(c, "Soaking")
	})
	active := e.records(0).GetActive()
	soakEnd := active.GetWrittenAt().AsTime().Add(soak)
	e.deleteNodeConfigAndWait(e.label)
	// The NodeConfig is gone while v2 is still on trial: otherwise this
	// test proves nothing.
	if r := e.records(0); r.GetLastKnownGood().GetSource().GetResourceVersion() != v1.ResourceVersion || time.Now().After(soakEnd) {
		t.Fatalf("the NodeConfig was deleted only after v2's soak ended at %v (records %v): the soak is too short for this machine", soakEnd, r)
	}
	node, err := e.c.Client.CoreV1().Nodes().Get(e.ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Annotations[v1alpha1.AnnotationAbandoned] != e.label {
		t.Fatalf("node %s not marked abandoned by %s: annotations %v", n.Name, e.label, node.Annotations)
	}

	if err := proc.WaitFor(soak+20*time.Second, func() (bool, error) {
		return e.records(0).GetLastKnownGood().GetSource().GetResourceVersion() == v2.ResourceVersion, nil
	}); err != nil {
		t.Fatalf("v2 stayed active through its soak on an abandoned node but was never promoted: %v (records %v)", err, e.records(0))
	}
	r := e.records(0)
	if promoted := r.GetLastKnownGood().GetWrittenAt().AsTime(); promoted.Before(soakEnd) {
		t.Fatalf("promoted at %v, before the soak ended at %v", promoted, soakEnd)
	}
	if !proto.Equal(r.GetActive(), active) {
		t.Fatalf("the abandoned node's active record changed: %v, was %v", r.GetActive(), active)
	}
	e.waitNode(n.Name, 20*time.Second, "v2 active and last-known-good", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.Active) == v2.ResourceVersion && rv(st.LastKnownGood) == v2.ResourceVersion && reasonIs(c, "Active")
	})
	stop()

	// A new NodeConfig takes the node over with a bad version: the
	// rollback goes to v2.
	bad := e.configMap("bad", map[string]string{"config.yaml": badYAML})
	e.use("again-"+e.label, "bad", nil)
	e.waitNode(n.Name, 20*time.Second, "rolled back to v2", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.Assigned) == bad.ResourceVersion && rv(st.Active) == v2.ResourceVersion && reasonIs(c, "RolledBack")
	})
	if got, _ := n.Target(); got != "maxPods: 90\n" {
		t.Fatalf("target = %q, want v2's", got)
	}
}

// The same when the ConfigMap is edited again while pacing holds the node:
// two nodes soak v2 (maxInTrial 2), maxInTrial drops to 1, and v3 comes
// mid-soak. One node takes v3 (superseding v2 mid-soak, as it may); the
// other is held by pacing with v2 active, and v2 becomes last-known-good
// on that node's own records at its soak's end, not when the held node is
// finally admitted to v3. The condition never says "on trial until" a
// time past.
func TestActiveConfigIsPromotedWhilePacingHoldsItsNode(t *testing.T) {
	const soak = 12 * time.Second
	e := newEnv(t, 2)
	v1 := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(1), "rollout": map[string]any{"maxInTrial": int64(2)}})
	for _, n := range e.nodes {
		e.waitNode(n.Name, 30*time.Second, "v1 promoted", func(st corev1.NodeConfigStatus, _ *corev1.NodeCondition) bool {
			return rv(st.LastKnownGood) == v1.ResourceVersion
		})
	}
	// The longer soak first (v1 is last-known-good: no trial), so that v2
	// is assigned with it.
	e.setSpec(map[string]any{"soakSeconds": int64(soak / time.Second), "rollout": map[string]any{"maxInTrial": int64(2)}})
	for i := range e.nodes {
		if err := proc.WaitFor(20*time.Second, func() (bool, error) {
			return e.records(i).GetAssigned().GetSoakSeconds() == int64(soak/time.Second), nil
		}); err != nil {
			t.Fatalf("the %v soak never reached node %s: %v", soak, e.nodes[i].Name, err)
		}
	}

	v2 := e.configMap("cfg", map[string]string{"config.yaml": "maxPods: 21\n"})
	soakEnd := make([]time.Time, len(e.nodes))
	for i := range e.nodes {
		if err := proc.WaitFor(20*time.Second, func() (bool, error) {
			a := e.records(i).GetActive()
			soakEnd[i] = a.GetWrittenAt().AsTime().Add(soak)
			return a.GetSource().GetResourceVersion() == v2.ResourceVersion, nil
		}); err != nil {
			t.Fatalf("node %s never activated v2 (maxInTrial 2): %v", e.nodes[i].Name, err)
		}
	}
	names := []string{e.nodes[0].Name, e.nodes[1].Name}
	stop := e.watchSoakClaims(3*time.Second, names...)
	defer stop()
	// Only one trial at a time from now on; the reconciler has synced every
	// node at that generation before v3 comes.
	e.setSpec(map[string]any{"soakSeconds": int64(soak / time.Second), "rollout": map[string]any{"maxInTrial": int64(1)}})
	e.waitObservedGeneration(e.label, 20*time.Second)
	// v3 in the middle of the soak, so that a held node would claim a trial
	// that ended for half a soak if nothing promoted it.
	first := soakEnd[0]
	if soakEnd[1].Before(first) {
		first = soakEnd[1]
	}
	time.Sleep(time.Until(first.Add(-soak / 2)))
	for i := range e.nodes {
		if r := e.records(i); r.GetLastKnownGood().GetSource().GetResourceVersion() != v1.ResourceVersion || time.Now().After(soakEnd[i]) {
			t.Fatalf("node %s: v2's soak ended (at %v) before v3 came (records %v): the soak is too short for this machine", e.nodes[i].Name, soakEnd[i], r)
		}
	}
	v3 := e.configMap("cfg", map[string]string{"config.yaml": "maxPods: 33\n"})

	// Each node either takes v3 before v2's soak ends, or is held and
	// promotes v2; read from the nodes' records until each has done one.
	promoted := make([]time.Time, len(e.nodes))   // v2's last-known-good record, when seen
	superseded := make([]time.Time, len(e.nodes)) // v3's assigned record, when seen
	err := proc.WaitFor(soak+30*time.Second, func() (bool, error) {
		done := 0
		for i := range e.nodes {
			r := e.records(i)
			if l := r.GetLastKnownGood(); l.GetSource().GetResourceVersion() == v2.ResourceVersion && promoted[i].IsZero() {
				promoted[i] = l.GetWrittenAt().AsTime()
			}
			if a := r.GetAssigned(); a.GetSource().GetResourceVersion() == v3.ResourceVersion && superseded[i].IsZero() {
				superseded[i] = a.GetWrittenAt().AsTime()
			}
			if !promoted[i].IsZero() || !superseded[i].IsZero() {
				done++
			}
		}
		return done == len(e.nodes), fmt.Errorf("%d of %d nodes promoted v2 or took v3", done, len(e.nodes))
	})
	if err != nil {
		t.Fatal(err)
	}
	// Without a wake at its soak's end, a held node is synced again only
	// when the trial holding its place ends (the other node's v3 promoted,
	// which frees the place) or by the waiting nodes' 30 s safety net: its
	// promotion must come before whichever is first.
	nextWake := func(i int) (time.Time, string) {
		for j := range e.nodes {
			if j == i || superseded[j].IsZero() {
				continue
			}
			var ended time.Time
			if err := proc.WaitFor(soak+30*time.Second, func() (bool, error) {
				l := e.records(j).GetLastKnownGood()
				ended = l.GetWrittenAt().AsTime()
				return l.GetSource().GetResourceVersion() == v3.ResourceVersion, nil
			}); err != nil {
				t.Fatalf("node %s took v3 but never promoted it: %v", e.nodes[j].Name, err)
			}
			return ended, fmt.Sprintf("node %s's v3 trial ended", e.nodes[j].Name)
		}
		return soakEnd[i].Add(30 * time.Second), "the waiting nodes' safety net"
	}
	held := 0
	for i, n := range e.nodes {
		switch {
		case !promoted[i].IsZero():
			held++
			wake, what := nextWake(i)
			if promoted[i].Before(soakEnd[i]) || !promoted[i].Before(wake) {
				t.Errorf("node %s: v2 promoted at %v, want at its soak's end %v, before %s at %v", n.Name, promoted[i], soakEnd[i], what, wake)
			}
			t.Logf("node %s held by pacing: v2 promoted %v after its soak's end, %v before %s", n.Name, promoted[i].Sub(soakEnd[i]), wake.Sub(promoted[i]), what)
		case superseded[i].After(soakEnd[i]):
			held++
			t.Errorf("node %s: v2 stayed active through its soak (ended %v) but was never promoted; v3 assigned at %v", n.Name, soakEnd[i], superseded[i])
		default:
			t.Logf("node %s took v3 %v before v2's soak ended", n.Name, soakEnd[i].Sub(superseded[i]))
		}
	}
	if held == 0 {
		t.Fatalf("no node was held by pacing: both took v3 before v2's soak ended (maxInTrial 1)")
	}
	// The held node says so: v2 is active and last-known-good, not on trial.
	for i, n := range e.nodes {
		if promoted[i].IsZero() {
			continue
		}
		e.waitNode(n.Name, 20*time.Second, "v2 last-known-good", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
			return rv(st.LastKnownGood) == v2.ResourceVersion && (reasonIs(c, "Active") || rv(st.Assigned) == v3.ResourceVersion)
		})
	}
	stop()
}

// waitObservedGeneration waits until the NodeConfig's status was computed
// at its current generation: every node it selects was synced at it.
func (e *env) waitObservedGeneration(name string, timeout time.Duration) {
	e.t.Helper()
	e.waitNodeConfig(name, timeout, "observedGeneration at the generation", func(nc *v1alpha1.NodeConfig) bool {
		return nc.Status.ObservedGeneration == nc.Generation
	})
}

var trialUntil = regexp.MustCompile(`on trial until (\S+) \(`)

// watchSoakClaims reads the nodes' NodeConfigReady conditions until stop is
// called (or the test ends) and fails the test if one says "Soaking ... on
// trial until T" while T is more than grace past (T has whole seconds: a
// second more is allowed). A soak that ended made the config
// last-known-good or was ended by a new assignment; the condition must
// not keep promising it.
func (e *env) watchSoakClaims(grace time.Duration, nodes ...string) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	var stale []string
	go func() {
		defer close(exited)
		seen := map[string]bool{}
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, name := range nodes {
				asked := time.Now()
				_, c, err := e.status(name)
				if err != nil || c == nil || c.Reason != "Soaking" || seen[name] {
					continue
				}
				m := trialUntil.FindStringSubmatch(c.Message)
				if m == nil {
					stale = append(stale, fmt.Sprintf("node %s: Soaking without an end: %q", name, c.Message))
					seen[name] = true
					continue
				}
				until, err := time.Parse(time.RFC3339, m[1])
				if err != nil {
					stale = append(stale, fmt.Sprintf("node %s: %q: %v", name, c.Message, err))
					seen[name] = true
					continue
				}
				if asked.After(until.Add(time.Second + grace)) {
					stale = append(stale, fmt.Sprintf("node %s at %s: %q", name, asked.UTC().Format(time.RFC3339Nano), c.Message))
					seen[name] = true
				}
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			close(done)
			<-exited
			for _, s := range stale {
				e.t.Errorf("the condition says a soak that ended is still on: %s", s)
			}
		})
	}
	e.t.Cleanup(stop)
	return stop
}
