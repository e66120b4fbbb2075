package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/configcheck"
	"nodeconfig.io/services/reconciler/internal/rollout"
)

// kubeletCheck stands in for the child process of the kubelet validator:
// it answers what answer says and counts its runs.
type kubeletCheck struct {
	runs   atomic.Int32
	mu     sync.Mutex
	answer func([]byte) error
}

func (k *kubeletCheck) check(_ context.Context, data []byte) error {
	k.runs.Add(1)
	k.mu.Lock()
	answer := k.answer
	k.mu.Unlock()
	return answer(data)
}

func (k *kubeletCheck) set(answer func([]byte) error) {
	k.mu.Lock()
	k.answer = answer
	k.mu.Unlock()
}

const missingBinary = "/opt/nodeconfig/nodeconfig-kubelet-check"

func cannotRun([]byte) error {
	return &configcheck.UnavailableError{Validator: "kubelet", Err: fmt.Errorf("fork/exec %s: no such file or directory", missingBinary)}
}

// kubeletFixture has nodes n1..n3 in pool a, ConfigMap ns/cfg at
// resourceVersion 10, and NodeConfig nc with the kubelet validator, whose
// runs k answers.
func kubeletFixture(t *testing.T) (*fixture, *kubeletCheck) {
	f := newFixture(t)
	k := &kubeletCheck{answer: func([]byte) error { return nil }}
	f.c.o.Checker = configcheck.Checker{Kubelet: k.check}
	for _, n := range []string{"n1", "n2", "n3"} {
		f.addNode(n, map[string]string{"pool": "a"})
	}
	f.addConfigMap("ns", "cfg", "10", map[string]string{"k": "maxPods: 57\n"})
	all := intstr.FromString("100%")
	nc := poolA("nc", v1alpha1.Rollout{MaxInTrial: &all})
	nc.Spec.Validator = "kubelet"
	f.setNodeConfig(nc)
	return f, k
}

// A kubelet validator that cannot run is no verdict: the version is
// assigned to no node, each node's sync fails naming the binary (retried
// with backoff), the NodeConfig says ValidationUnavailable (its one
// Warning, none per node), and the nodes
// of one version share one run per BaseDelay. Once the validator runs, the
// version rolls out: the failure was never kept as a verdict.
func TestKubeletValidatorThatCannotRunHoldsTheVersion(t *testing.T) {
	f, k := kubeletFixture(t)
	k.set(cannotRun)
	for _, n := range []string{"n1", "n2", "n3"} {
		err := f.syncNode(n)
		if err == nil || !strings.Contains(err.Error(), missingBinary) {
			t.Fatalf("%s: sync err %v, want a failure naming %s", n, err, missingBinary)
		}
		if w := f.agents.agents[n].writes(); len(w) != 0 {
			t.Fatalf("%s: a version nobody judged reached the node: %v", n, w)
		}
		info, _ := f.c.NodeInfo(n)
		if !strings.Contains(info.Err, missingBinary) || info.Backoff <= 0 {
			t.Fatalf("%s: node info err %q backoff %v, want the reason and a retry with backoff", n, info.Err, info.Backoff)
		}
	}
	if got := k.runs.Load(); got != 1 {
		t.Fatalf("%d runs for three nodes at once, want 1", got)
	}
	if f.c.knownRefusal(rollout.Version{UID: "uid-cfg", ResourceVersion: "10", Key: "k", Validator: "kubelet"}) != "" {
		t.Fatal("the failure to run was kept as a refusal")
	}
	f.syncNodeConfig("nc")
	for _, typ := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionDegraded} {
		c := meta.FindStatusCondition(f.storedNodeConfig("nc").Status.Conditions, typ)
		if c == nil || c.Reason != v1alpha1.ReasonValidationUnavailable || !strings.Contains(c.Message, missingBinary) || !strings.Contains(c.Message, "resourceVersion 10") {
			t.Fatalf("%s condition %+v, want %s naming the version and the binary", typ, c, v1alpha1.ReasonValidationUnavailable)
		}
	}
	// The NodeConfig's problem is said once, on it, not once per node.
	var warnings []string
	for _, e := range f.events() {
		if strings.HasPrefix(e, "Warning ") {
			warnings = append(warnings, e)
		}
	}
	if len(warnings) != 1 || !strings.HasPrefix(warnings[0], "Warning "+v1alpha1.ReasonValidationUnavailable) || !strings.Contains(warnings[0], missingBinary) {
		t.Fatalf("warnings %q, want one %s naming the binary", warnings, v1alpha1.ReasonValidationUnavailable)
	}

	// The validator is back; the nodes' first retry runs it again.
	k.set(func([]byte) error { return nil })
	f.now = f.now.Add(DefaultBaseDelay * 8 / 10)
	for _, n := range []string{"n1", "n2", "n3"} {
		if err := f.syncNode(n); err != nil {
			t.Fatalf("%s: sync after the validator came back: %v", n, err)
		}
		if src := f.agents.agents[n].records().GetAssigned().GetSource(); src.GetResourceVersion() != "10" {
			t.Fatalf("%s: assigned %v, want resourceVersion 10", n, src)
		}
	}
	if got := k.runs.Load(); got != 2 {
		t.Fatalf("%d runs, want 2: the failed one and the one that judged", got)
	}
	if c := f.condition("nc", v1alpha1.ConditionDegraded); c == nil || c.Reason == v1alpha1.ReasonValidationUnavailable {
		t.Fatalf("Degraded %+v once the version was judged", c)
	}
}

// A refusal is a verdict: kept, run once, and said as the kubelet
// validator in process says it.
func TestKubeletRefusalIsKeptAndWorded(t *testing.T) {
	f, k := kubeletFixture(t)
	k.set(func([]byte) error {
		return errors.New("invalid configuration: maxPods (--max-pods) -1 must not be a negative number")
	})
	for range 2 {
		f.syncAll("n1", "n2", "n3")
	}
	if got := k.runs.Load(); got != 1 {
		t.Fatalf("%d runs for one version, want 1", got)
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		if w := f.agents.agents[n].writes(); len(w) != 0 {
			t.Fatalf("%s: a refused version reached the node: %v", n, w)
		}
		if info, _ := f.c.NodeInfo(n); info.Err != "" {
			t.Fatalf("%s: a refusal failed the node's sync: %s", n, info.Err)
		}
	}
	c := f.condition("nc", v1alpha1.ConditionReady)
	want := "fails validator kubelet: invalid KubeletConfiguration: invalid configuration: maxPods (--max-pods) -1 must not be a negative number"
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonConfigRefused || !strings.Contains(c.Message, want) {
		t.Fatalf("Ready %+v, want False/%s saying %q", c, v1alpha1.ReasonConfigRefused, want)
	}
}

// Nodes syncing one new version at once share one run of the validator,
// which runs outside the controller's locks.
func TestConcurrentSyncsShareOneRun(t *testing.T) {
	f, k := kubeletFixture(t)
	release := make(chan struct{})
	k.set(func([]byte) error { <-release; return nil })
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for _, n := range []string{"n1", "n2", "n3"} {
		wg.Go(func() { errs <- f.syncNode(n) })
	}
	deadline := time.Now().Add(10 * time.Second)
	for k.runs.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the validator never ran")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// While it runs, the verdicts of other versions stay readable.
	if f.c.knownRefusal(rollout.Version{UID: "uid-other", ResourceVersion: "1", Key: "k", Validator: "yaml"}) != "" {
		t.Fatal("unexpected verdict")
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := k.runs.Load(); got != 1 {
		t.Fatalf("%d runs for three concurrent syncs of one version, want 1", got)
	}
}
