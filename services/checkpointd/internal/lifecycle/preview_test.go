package lifecycle

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/checkpointd/internal/materialize"
	"nodeconfig.io/services/configcheck/kubeletcheck"
)

const kubeletHeader = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

// kubeletNode gives the fixture a kubelet: a base config with a soft
// eviction threshold and its grace period, and a site drop-in beside ours.
func kubeletNode(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t)
	base := filepath.Join(f.dir, "kubelet-config.yaml")
	f.target = materialize.Target{Dir: filepath.Join(f.dir, "kubelet.conf.d"), Name: "50-nodeconfig.conf"}
	for path, content := range map[string]string{
		base: kubeletHeader + "failCgroupV1: false\nmaxPods: 110\nevictionSoft:\n  memory.available: 1Gi\nevictionSoftGracePeriod:\n  memory.available: 1m\n",
		filepath.Join(f.target.Dir, "10-site.conf"): kubeletHeader + "maxPods: 80\n",
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f.node = New(Options{Store: f.store, Target: f.target, Kubelet: &kubeletcheck.NodeFiles{BaseConfig: base, DropInDir: f.target.Dir, Own: f.target.Path()}})
	return f
}

func (f *fixture) assignKubelet(t *testing.T, rv, content string) nodeconfigv1.ActivateOutcome {
	t.Helper()
	f.put(t, rv, content)
	if _, err := f.node.Assign(Assignment{Source: src(rv), SoakSeconds: 60, Validator: nodeconfigv1.Validator_VALIDATOR_KUBELET}); err != nil {
		t.Fatal(err)
	}
	outcome, _, err := f.node.Activate()
	if err != nil {
		t.Fatal(err)
	}
	return outcome
}

// A drop-in valid alone but refused merged with the node's base config is
// a late error at activation: nothing is written, so nothing restarts.
func TestKubeletDropInRefusedMergedWithTheNodesFilesIsNeverWritten(t *testing.T) {
	f := kubeletNode(t)
	good := kubeletHeader + "maxPods: 57\n"
	if got := f.assignKubelet(t, "1", good); got != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ACTIVATED {
		t.Fatalf("good drop-in: %v", got)
	}
	f.promote(t, "1")
	bad := kubeletHeader + "evictionSoftGracePeriod: null\n"
	if got := f.assignKubelet(t, "2", bad); got != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ROLLED_BACK {
		t.Fatalf("drop-in refused merged: %v, want a rollback", got)
	}
	e := f.records(t).GetError().GetError()
	if e.GetReason() != "ValidationFailed" || !strings.Contains(e.GetMessage(), "grace period must be specified") {
		t.Fatalf("error %v, want ValidationFailed naming the missing grace period", e)
	}
	if content, _ := f.targetContent(t); content != good {
		t.Fatalf("the file holds %q, want last-known-good left in place", content)
	}
}

func TestPreviewMergesThePayloadWithTheNodesFilesAndWritesNothing(t *testing.T) {
	f := kubeletNode(t)
	p, err := f.node.Preview(ctx, []byte(kubeletHeader+"maxPods: 57\n"), nodeconfigv1.Validator_VALIDATOR_KUBELET)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Merged || p.Refused != "" {
		t.Fatalf("merged %v refused %q", p.Merged, p.Refused)
	}
	if !strings.Contains(p.Current, "maxPods: 80") || !strings.Contains(p.Candidate, "maxPods: 57") {
		t.Fatalf("current (want maxPods 80 from the site drop-in):\n%s\ncandidate (want 57):\n%s", p.Current, p.Candidate)
	}
	if len(p.Files) != 3 || p.Files[2] != f.target.Path() {
		t.Fatalf("files %v, want base, site drop-in, ours", p.Files)
	}
	if _, there := f.targetContent(t); there {
		t.Fatal("a preview wrote the target file")
	}
	if r := f.records(t); r.GetAssigned() != nil || r.GetActive() != nil {
		t.Fatalf("a preview changed the records: %v", r)
	}

	refused, err := f.node.Preview(ctx, []byte(kubeletHeader+"hairpinMode: bogus\n"), nodeconfigv1.Validator_VALIDATOR_KUBELET)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(refused.Refused, "hairpinMode") || refused.Candidate != "" {
		t.Fatalf("refused %q candidate %q", refused.Refused, refused.Candidate)
	}
}

// The node keeps which NodeConfig assigned its config and which one its
// reset left, so that a reconciler that never saw it selected paces its
// departure by the right NodeConfig.
func TestTheNodeRecordsWhichNodeConfigItFollows(t *testing.T) {
	f := newFixture(t)
	f.put(t, "1", "a: 1\n")
	a := assignment("1", 60)
	a.NodeConfig = "pool-a"
	assigned, err := f.node.Assign(a)
	if err != nil {
		t.Fatal(err)
	}
	if got := assigned.GetAssigned().GetNodeConfig(); got != "pool-a" {
		t.Fatalf("assigned record names NodeConfig %q, want pool-a", got)
	}
	reset, err := f.node.Reset(60, "pool-a")
	if err != nil {
		t.Fatal(err)
	}
	if r := f.records(t).GetLastReset(); r.GetNodeConfig() != "pool-a" || r.GetFrom().GetResourceVersion() != "1" || reset.GetLastReset().GetNodeConfig() != "pool-a" {
		t.Fatalf("reset record %v, want it to name pool-a and the config it left", r)
	}
}
