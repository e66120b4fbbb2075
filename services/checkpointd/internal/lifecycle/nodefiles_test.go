package lifecycle

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/configcheck"
)

func (f *fixture) writeBase(t *testing.T, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(f.dir, "kubelet-config.yaml"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A base config the kubelet's decoder refuses (a half-written file, a
// typo of the node's owner) is the node's fault: the candidate is not
// blamed, and it is judged again once the base is mended.
func TestAnUndecodableBaseConfigIsAnEarlyError(t *testing.T) {
	f := kubeletNode(t)
	f.writeBase(t, kubeletHeader+"maxPods: [\n")
	good := kubeletHeader + "maxPods: 57\n"
	f.put(t, "1", good)
	if _, err := f.node.Assign(Assignment{Source: src("1"), SoakSeconds: 60, Validator: nodeconfigv1.Validator_VALIDATOR_KUBELET}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.node.Activate(); err == nil {
		t.Fatal("activated over a base config the kubelet cannot decode")
	}
	e := f.records(t).GetError().GetError()
	if e.GetPhase() != nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY || e.GetReason() != records.ReasonNodeFilesUnreadable {
		t.Fatalf("error %v %s %q; want an early %s", e.GetPhase(), e.GetReason(), e.GetMessage(), records.ReasonNodeFilesUnreadable)
	}
	if records.FailedLate(f.records(t), src("1"), nodeconfigv1.Validator_VALIDATOR_KUBELET) != nil {
		t.Fatal("version 1 marked failed for the node's own broken file")
	}
	f.writeBase(t, kubeletHeader+"failCgroupV1: false\n")
	if got, _, err := f.node.Activate(); err != nil || got != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ACTIVATED {
		t.Fatalf("once the base is mended: %v %v, want activated", got, err)
	}
}

// The kubelet reads its files only at start: a base config changed under
// a running kubelet so that the active drop-in no longer validates would
// stop it at its next start. Judged again, the drop-in is rolled back
// before that start comes.
func TestActiveIsJudgedAgainWhenTheBaseChanges(t *testing.T) {
	f := kubeletNode(t)
	proven := kubeletHeader + "imageGCHighThresholdPercent: 95\n"
	if got := f.assignKubelet(t, "1", proven); got != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ACTIVATED {
		t.Fatalf("v1: %v", got)
	}
	f.promote(t, "1")
	trial := kubeletHeader + "imageGCHighThresholdPercent: 90\n"
	if got := f.assignKubelet(t, "2", trial); got != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ACTIVATED {
		t.Fatalf("v2: %v", got)
	}
	if err := f.node.RejudgeActive(); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.targetContent(t); got != trial {
		t.Fatalf("nothing changed, yet the file is %q", got)
	}
	// The node's owner raises the low threshold above the trial's high one.
	f.writeBase(t, kubeletHeader+"failCgroupV1: false\nimageGCLowThresholdPercent: 92\n")
	if err := f.node.RejudgeActive(); err != nil {
		t.Fatal(err)
	}
	recs := f.records(t)
	if got, _ := f.targetContent(t); got != proven {
		t.Fatalf("file %q after the base changed; want last-known-good %q", got, proven)
	}
	if e := recs.GetError().GetError(); e.GetPhase() != nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE || e.GetReason() != configcheck.ReasonValidationFailed {
		t.Fatalf("error %v %s %q; want a late %s", e.GetPhase(), e.GetReason(), e.GetMessage(), configcheck.ReasonValidationFailed)
	}
	// Then last-known-good itself stops validating: the local default.
	f.writeBase(t, kubeletHeader+"failCgroupV1: false\nimageGCLowThresholdPercent: 96\n")
	if err := f.node.RejudgeActive(); err != nil {
		t.Fatal(err)
	}
	recs = f.records(t)
	if got, _ := f.targetContent(t); got != "" || recs.GetActive() != nil || recs.GetLastKnownGood() != nil {
		t.Fatalf("file %q, active %v, last-known-good %v; want the local default", got, recs.GetActive(), recs.GetLastKnownGood())
	}
}

// A base config the agent cannot read says nothing about the drop-in:
// nothing is rolled back.
func TestAnUnreadableBaseRollsNothingBack(t *testing.T) {
	f := kubeletNode(t)
	good := kubeletHeader + "maxPods: 57\n"
	if got := f.assignKubelet(t, "1", good); got != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ACTIVATED {
		t.Fatalf("v1: %v", got)
	}
	if err := os.Remove(filepath.Join(f.dir, "kubelet-config.yaml")); err != nil {
		t.Fatal(err)
	}
	_ = f.node.RejudgeActive()
	if got, _ := f.targetContent(t); got != good || f.records(t).GetError() != nil {
		t.Fatalf("file %q, error %v; want v1 in place and no error", got, f.records(t).GetError())
	}
}

// The watch sees a changed base by itself, once it holds still.
func TestTheNodeFilesWatchRollsBackWhatAChangedBaseRefuses(t *testing.T) {
	f := kubeletNode(t)
	proven := kubeletHeader + "imageGCHighThresholdPercent: 95\n"
	f.assignKubelet(t, "1", proven)
	f.promote(t, "1")
	trial := kubeletHeader + "imageGCHighThresholdPercent: 90\n"
	if got := f.assignKubelet(t, "2", trial); got != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ACTIVATED {
		t.Fatalf("v2: %v", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.node.RunNodeFilesWatch(ctx, 10*time.Millisecond) }()
	t.Cleanup(func() { cancel(); <-done })
	f.writeBase(t, kubeletHeader+"failCgroupV1: false\nimageGCLowThresholdPercent: 92\n")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if got, _ := f.targetContent(t); got == proven {
			break
		}
		if time.Now().After(deadline) {
			got, _ := f.targetContent(t)
			t.Fatalf("file still %q 10 s after the base changed; want last-known-good", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
