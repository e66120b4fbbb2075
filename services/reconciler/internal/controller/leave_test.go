package controller

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"nodeconfig.io/services/api/v1alpha1"
)

// resetNodes names the nodes whose agents recorded a reset.
func resetNodes(agents map[string]*fakeAgent) (out []string) {
	for _, n := range poolANodes {
		if agents[n].records().GetLastReset() != nil {
			out = append(out, n)
		}
	}
	return out
}

// The ways a NodeConfig lets its nodes go back to their local default:
// each is a change like any other, paced by maxInTrial and held by a pause.
var leavings = map[string]func(f *fixture, nc *v1alpha1.NodeConfig){
	"deleted": func(f *fixture, nc *v1alpha1.NodeConfig) { f.deleting(nc) },
	"source removed": func(f *fixture, nc *v1alpha1.NodeConfig) {
		nc.Generation++
		nc.Spec.Source = nil
		f.setNodeConfig(nc)
	},
}

func TestLeavingAConfigIsPacedAndPausable(t *testing.T) {
	for name, leave := range leavings {
		t.Run(name, func(t *testing.T) {
			one := intstr.FromInt32(1)
			nc := poolA("nc", v1alpha1.Rollout{MaxInTrial: &one})
			f, agents := rolledOut(t, nc)
			leave(f, nc)
			f.syncAll(poolANodes...)
			f.syncAll(poolANodes...)
			if got := resetNodes(agents); len(got) != 1 {
				t.Fatalf("reset nodes %v right after the NodeConfig let them go; want one (maxInTrial 1)", got)
			}
			// Paused: the next reset waits, even after the first one's soak.
			paused := *f.storedNodeConfig("nc")
			paused.Generation++ // a spec change, as the API server counts it
			paused.Spec.Rollout.Paused = true
			f.setNodeConfig(&paused)
			f.now = f.now.Add(61 * time.Second)
			f.syncAll(poolANodes...)
			if got := resetNodes(agents); len(got) != 1 {
				t.Fatalf("reset nodes %v while paused; want still one", got)
			}
			resumed := paused
			resumed.Generation++
			resumed.Spec.Rollout.Paused = false
			f.setNodeConfig(&resumed)
			f.syncAll(poolANodes...)
			if got := resetNodes(agents); len(got) != 2 {
				t.Fatalf("reset nodes %v after the resume; want two", got)
			}
			f.now = f.now.Add(61 * time.Second)
			f.syncAll(poolANodes...)
			if got := resetNodes(agents); len(got) != 3 {
				t.Fatalf("reset nodes %v after the second soak; want all three", got)
			}
		})
	}
}

// The emergency exit: nodeconfig.io/reset-now on the NodeConfig resets
// every node it lets go at once.
func TestResetNowLeavesAtOnce(t *testing.T) {
	for name, leave := range leavings {
		t.Run(name, func(t *testing.T) {
			one := intstr.FromInt32(1)
			nc := poolA("nc", v1alpha1.Rollout{MaxInTrial: &one})
			f, agents := rolledOut(t, nc)
			nc.Annotations = map[string]string{v1alpha1.AnnotationResetNow: "true"}
			nc.Spec.Rollout.Paused = true
			leave(f, nc)
			f.syncAll(poolANodes...)
			if got := resetNodes(agents); len(got) != 3 {
				t.Fatalf("reset nodes %v with %s; want all three at once", got, v1alpha1.AnnotationResetNow)
			}
		})
	}
}
