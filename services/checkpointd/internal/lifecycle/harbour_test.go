package lifecycle

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// Last-known-good the kubelet does not run (a kubelet upgrade dropped a
// gate it sets, the base config changed under it) is no harbour: the node
// goes to its local default, the drop-in removed, and says so.
func TestLastKnownGoodTheKubeletDoesNotRunFallsBackToTheLocalDefault(t *testing.T) {
	f := newFixture(t)
	f.assign(t, "1", "a: 1\n")
	f.promote(t, "1")
	rolled, err := (ConsumerNode{f.node}).RollBack(src("1"), records.ReasonConsumerUnhealthy, "the kubelet turned unhealthy")
	if err != nil || !rolled {
		t.Fatalf("RollBack of last-known-good = %v, %v; want a fall back to the local default", rolled, err)
	}
	recs := f.records(t)
	if recs.GetActive() != nil || recs.GetLastKnownGood() != nil {
		t.Fatalf("records %v; want the local default active and no last-known-good", recs)
	}
	if e := recs.GetError().GetError(); e.GetPhase() != nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE || !strings.Contains(e.GetMessage(), "local default") {
		t.Fatalf("error %v; want a late error that says the node fell back to its local default", e)
	}
	if _, ok := f.targetContent(t); ok {
		t.Fatal("the drop-in is still there")
	}
	// Version 1 is marked: nothing activates it again.
	if outcome, _, err := f.node.Activate(); err != nil || outcome != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ROLLED_BACK {
		t.Fatalf("Activate = %v, %v; want ROLLED_BACK", outcome, err)
	}
	if _, ok := f.targetContent(t); ok {
		t.Fatal("the drop-in came back")
	}
}

// The node's own files that cannot be read say nothing of the config: an
// early error, retried, nothing rolled back.
func TestAnUnreadableBaseConfigIsAnEarlyError(t *testing.T) {
	f := kubeletNode(t)
	good := kubeletHeader + "maxPods: 57\n"
	if got := f.assignKubelet(t, "1", good); got != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ACTIVATED {
		t.Fatalf("good drop-in: %v", got)
	}
	f.promote(t, "1")
	if err := os.Remove(filepath.Join(f.dir, "kubelet-config.yaml")); err != nil {
		t.Fatal(err)
	}
	f.put(t, "2", kubeletHeader+"maxPods: 58\n")
	if _, err := f.node.Assign(Assignment{Source: src("2"), SoakSeconds: 60, Validator: nodeconfigv1.Validator_VALIDATOR_KUBELET}); err != nil {
		t.Fatal(err)
	}
	outcome, _, err := f.node.Activate()
	var early *WriteFailedError
	if !errors.As(err, &early) || outcome == nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ROLLED_BACK {
		t.Fatalf("Activate = %v, %v; want an early error, nothing rolled back", outcome, err)
	}
	recs := f.records(t)
	if e := recs.GetError().GetError(); e.GetPhase() != nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY || e.GetReason() != records.ReasonNodeFilesUnreadable {
		t.Fatalf("error %v; want the early %s", e, records.ReasonNodeFilesUnreadable)
	}
	if records.FailedLate(recs, src("2"), nodeconfigv1.Validator_VALIDATOR_KUBELET) != nil {
		t.Fatal("version 2 was marked as failed for the node's own unreadable file")
	}
	if content, _ := f.targetContent(t); content != good {
		t.Fatalf("the file holds %q, want last-known-good left in place", content)
	}
}
