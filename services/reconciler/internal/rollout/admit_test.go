package rollout

import (
	"sync"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/policy"
)

var v1 = Version{UID: "uid-cfg", ResourceVersion: "10", Key: "k", Validator: "yaml"}

// assignedV1 are the records of a node assigned v1.
func assignedV1() *nodeconfigv1.Records {
	return &nodeconfigv1.Records{Assigned: &nodeconfigv1.AssignedRecord{
		Source:    &nodeconfigv1.ConfigSource{Namespace: "ns", Name: "cfg", Uid: v1.UID, ResourceVersion: v1.ResourceVersion, Key: v1.Key},
		Validator: nodeconfigv1.Validator_VALIDATOR_YAML,
	}}
}

// Workers asking at the same time never admit more than maxInTrial.
func TestConcurrentAdmissionsRespectMaxInTrial(t *testing.T) {
	b := newBook()
	nc := nodeConfig("nc", 3)
	var admitted atomic.Int32
	var wg sync.WaitGroup
	for i := range 20 {
		node := string(rune('a' + i))
		wg.Go(func() {
			if b.Admit(nc, node, v1, everyone(20)) == policy.Admitted {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	if got := admitted.Load(); got != 3 {
		t.Fatalf("20 concurrent asks admitted %d, want maxInTrial 3", got)
	}
}

// A version stops spreading once maxFailures nodes rolled back from it,
// counting those the status keeps and those rolled back now.
func TestRollbacksHaltAVersionAtMaxFailures(t *testing.T) {
	b := newBook()
	nc := nodeConfig("nc", 10)
	two := int32(2)
	nc.Spec.Rollout.MaxFailures = &two
	b.Synced("n1", Sync{Facts: Facts{State: rolledBack, NodeConfig: "nc", Records: assignedV1()}})
	if got := b.Admit(nc, "n3", v1, everyone(10)); got != policy.Admitted {
		t.Fatalf("one rollback of two allowed: %v, want Admitted", got)
	}
	b.Synced("n2", Sync{Facts: Facts{State: rolledBack, NodeConfig: "nc", Records: assignedV1()}})
	if got := b.Admit(nc, "n4", v1, everyone(10)); got != policy.Halted {
		t.Fatalf("two rollbacks of two allowed: %v, want Halted", got)
	}
	v2 := v1
	v2.ResourceVersion = "11"
	if got := b.Admit(nc, "n4", v2, everyone(10)); got != policy.Admitted {
		t.Fatalf("a new version after a halt: %v, want Admitted", got)
	}

	// A new leader reads the halt back from the status alone.
	fresh := newBook()
	kept := nc.DeepCopy()
	kept.Status.RolledBackVersions = b.RolledBackVersions(nc, []string{"n1", "n2"})
	if got := fresh.Admit(kept, "n5", v1, Ask{Selected: 10}); got != policy.Halted {
		t.Fatalf("a halt kept in the status, not every node seen: %v, want Halted", got)
	}
}

// Nothing starts while the NodeConfig is held or a node may be unseen.
func TestAdmissionWaitsWhileHeldOrNotEveryNodeSeen(t *testing.T) {
	b := newBook()
	nc := nodeConfig("nc", 10)
	for name, ask := range map[string]Ask{
		"held":     {Seen: true, Selected: 10, Held: v1alpha1.ReasonPaused},
		"not seen": {Selected: 10},
	} {
		if got := b.Admit(nc, "n1", v1, ask); got != policy.Wait {
			t.Errorf("%s: admission %v, want Wait", name, got)
		}
		if got := b.Depart(nc, "n2", ask); got != policy.Wait {
			t.Errorf("%s: departure %v, want Wait", name, got)
		}
	}
}

// A trial of every node (maxInTrial 100 % or more) has a place for each
// node whatever the nodes not seen yet say, so its nodes start at their
// first sync; under 100 %, with waves, or held, they still wait.
func TestATrialOfEveryNodeWaitsForNoUnseenNode(t *testing.T) {
	b := newBook()
	every, most := intstr.FromString("100%"), intstr.FromString("99%")
	nc := nodeConfig("nc", 1)
	nc.Spec.Rollout.MaxInTrial = &every
	notSeen := Ask{Selected: 10}
	if got := b.Admit(nc, "n1", v1, notSeen); got != policy.Admitted {
		t.Errorf("maxInTrial 100%%, not every node seen: admission %v, want Admitted", got)
	}
	if got := b.Depart(nc, "n2", notSeen); got != policy.Admitted {
		t.Errorf("maxInTrial 100%%, not every node seen: departure %v, want Admitted", got)
	}
	if got := b.Admit(nc, "n3", v1, Ask{Selected: 10, Held: v1alpha1.ReasonPaused}); got != policy.Wait {
		t.Errorf("maxInTrial 100%%, held: admission %v, want Wait", got)
	}
	if got := b.Admit(nc, "n4", v1, Ask{Selected: 10, Waves: &Waves{}}); got != policy.Wait {
		t.Errorf("maxInTrial 100%% in waves, not every node seen: admission %v, want Wait", got)
	}
	paced := nodeConfig("paced", 1)
	paced.Spec.Rollout.MaxInTrial = &most
	if got := b.Admit(paced, "n5", v1, notSeen); got != policy.Wait {
		t.Errorf("maxInTrial 99%%, not every node seen: admission %v, want Wait", got)
	}
}

// A node leaving a NodeConfig takes a place in its trial until its reset
// ends; the NodeConfig's waiting nodes are then told.
func TestADepartureTakesAPlaceInTheTrialItLeaves(t *testing.T) {
	b := newBook()
	nc := nodeConfig("nc", 1)
	if got := b.Depart(nc, "n1", everyone(1)); got != policy.Admitted {
		t.Fatalf("the first departure: %v, want Admitted", got)
	}
	if got := b.Admit(nc, "n2", v1, everyone(1)); got != policy.Wait {
		t.Fatalf("a trial beside a departure with maxInTrial 1: %v, want Wait", got)
	}
	freed := b.Synced("n1", Sync{Facts: Facts{State: nodeconfigv1.LifecycleState_LIFECYCLE_STATE_LOCAL_DEFAULT}})
	if len(freed) != 1 || freed[0] != "nc" {
		t.Fatalf("the reset's end freed %v, want nc", freed)
	}
	if got := b.Admit(nc, "n2", v1, everyone(1)); got != policy.Admitted {
		t.Fatalf("a trial once the departure ended: %v, want Admitted", got)
	}
}

// A node that fails before its trial started gives its place back; one
// that fails once it started keeps it.
func TestAFailureGivesThePlaceBackOnlyBeforeTheTrialStarted(t *testing.T) {
	b := newBook()
	nc := nodeConfig("nc", 1)
	b.Admit(nc, "n1", v1, everyone(2))
	if freed := b.Synced("n1", Sync{Facts: Facts{State: failing, NodeConfig: "nc"}, Failed: true}); len(freed) != 1 || freed[0] != "nc" {
		t.Fatalf("a failure before the trial freed %v, want nc", freed)
	}
	if got := b.Admit(nc, "n2", v1, everyone(2)); got != policy.Admitted {
		t.Fatalf("after n1 gave its place back: %v, want Admitted", got)
	}
	if freed := b.Synced("n2", Sync{Facts: Facts{State: failing, NodeConfig: "nc", Records: assignedV1()}, Failed: true}); len(freed) != 0 {
		t.Fatalf("a failure mid-trial freed %v", freed)
	}
	if got := b.Admit(nc, "n1", v1, everyone(2)); got != policy.Wait {
		t.Fatalf("beside n2 failing mid-trial: %v, want Wait", got)
	}
}

// A deleted node's departure frees its place.
func TestForgetFreesTheDeparture(t *testing.T) {
	b := newBook()
	nc := nodeConfig("nc", 1)
	b.Depart(nc, "n1", everyone(1))
	if from := b.Forget("n1"); from != "nc" {
		t.Fatalf("Forget said n1 departed from %q, want nc", from)
	}
	if got := b.Admit(nc, "n2", v1, everyone(1)); got != policy.Admitted {
		t.Fatalf("after the departing node was deleted: %v, want Admitted", got)
	}
	if from, following := b.Remembered("n1"); from != "" || following != "" {
		t.Fatalf("a forgotten node is remembered leaving %q, following %q", from, following)
	}
}

// A node that drains before its change is on trial (its sync says
// SOAKING), and so is one whose drain failed (FAILING mid-trial): both
// keep their place, also to a reconciler that never admitted them (a
// fail-over).
func TestADrainingNodeKeepsItsPlace(t *testing.T) {
	b := newBook()
	nc := nodeConfig("nc", 2)
	draining := assignedV1()
	draining.Drain = &nodeconfigv1.DrainRecord{Source: draining.GetAssigned().GetSource(), Phase: nodeconfigv1.DrainPhase_DRAIN_PHASE_DRAINING}
	b.Synced("n1", Sync{Facts: Facts{State: soaking, NodeConfig: "nc", Records: draining}})
	drainFailed := assignedV1()
	drainFailed.Error = &nodeconfigv1.ErrorRecord{Error: &nodeconfigv1.ConfigError{Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY, Reason: "DrainFailed"}}
	b.Synced("n2", Sync{Facts: Facts{State: failing, NodeConfig: "nc", Records: drainFailed}, Failed: true})
	if got := b.Admit(nc, "n3", v1, everyone(10)); got != policy.Wait {
		t.Fatalf("beside a draining node and one whose drain failed, maxInTrial 2: %v, want Wait", got)
	}
}
