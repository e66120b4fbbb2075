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
	f.svc = New(Options{Store: f.store, Target: f.target, Kubelet: &kubeletcheck.Node{BaseConfig: base, DropInDir: f.target.Dir, Own: f.target.Path()}})
	return f
}

func (f *fixture) assignKubelet(t *testing.T, rv, content string) nodeconfigv1.ActivateOutcome {
	t.Helper()
	f.put(t, rv, content)
	if _, err := f.svc.SetAssigned(ctx, &nodeconfigv1.SetAssignedRequest{Source: src(rv), SoakSeconds: 60, Validator: nodeconfigv1.Validator_VALIDATOR_KUBELET}); err != nil {
		t.Fatal(err)
	}
	resp, err := f.svc.Activate(ctx, &nodeconfigv1.ActivateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetOutcome()
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
	resp, err := f.svc.PreviewConfig(ctx, &nodeconfigv1.PreviewConfigRequest{Payload: []byte(kubeletHeader + "maxPods: 57\n"), Validator: nodeconfigv1.Validator_VALIDATOR_KUBELET})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetMerged() || resp.GetRefused() != "" {
		t.Fatalf("merged %v refused %q", resp.GetMerged(), resp.GetRefused())
	}
	if !strings.Contains(resp.GetCurrent(), "maxPods: 80") || !strings.Contains(resp.GetCandidate(), "maxPods: 57") {
		t.Fatalf("current (want maxPods 80 from the site drop-in):\n%s\ncandidate (want 57):\n%s", resp.GetCurrent(), resp.GetCandidate())
	}
	if len(resp.GetFiles()) != 3 || resp.GetFiles()[2] != f.target.Path() {
		t.Fatalf("files %v, want base, site drop-in, ours", resp.GetFiles())
	}
	if _, there := f.targetContent(t); there {
		t.Fatal("a preview wrote the target file")
	}
	if r := f.records(t); r.GetAssigned() != nil || r.GetActive() != nil {
		t.Fatalf("a preview changed the records: %v", r)
	}

	refused, err := f.svc.PreviewConfig(ctx, &nodeconfigv1.PreviewConfigRequest{Payload: []byte(kubeletHeader + "hairpinMode: bogus\n"), Validator: nodeconfigv1.Validator_VALIDATOR_KUBELET})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(refused.GetRefused(), "hairpinMode") || refused.GetCandidate() != "" {
		t.Fatalf("refused %q candidate %q", refused.GetRefused(), refused.GetCandidate())
	}
}

// The node keeps which NodeConfig assigned its config and which one its
// reset left, so that a reconciler that never saw it selected paces its
// departure by the right NodeConfig.
func TestTheNodeRecordsWhichNodeConfigItFollows(t *testing.T) {
	f := newFixture(t)
	f.put(t, "1", "a: 1\n")
	resp, err := f.svc.SetAssigned(ctx, &nodeconfigv1.SetAssignedRequest{Source: src("1"), SoakSeconds: 60, NodeConfig: "pool-a"})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetRecords().GetAssigned().GetNodeConfig(); got != "pool-a" {
		t.Fatalf("assigned record names NodeConfig %q, want pool-a", got)
	}
	reset, err := f.svc.Reset(ctx, &nodeconfigv1.ResetRequest{SoakSeconds: 60, NodeConfig: "pool-a"})
	if err != nil {
		t.Fatal(err)
	}
	if r := f.records(t).GetLastReset(); r.GetNodeConfig() != "pool-a" || r.GetFrom().GetResourceVersion() != "1" || reset.GetRecords().GetLastReset().GetNodeConfig() != "pool-a" {
		t.Fatalf("reset record %v, want it to name pool-a and the config it left", r)
	}
}
