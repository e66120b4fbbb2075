package rollout

import (
	"fmt"
	"slices"
	"testing"

	"nodeconfig.io/services/api/v1alpha1"
)

// The status list keeps what it had, adds the selected nodes rolled back
// now, and forgets the oldest versions past keptVersions.
func TestRolledBackVersionsMergeAndForgetTheOldest(t *testing.T) {
	b := newBook()
	nc := nodeConfig("nc", 1)
	for i := range keptVersions {
		nc.Status.RolledBackVersions = append(nc.Status.RolledBackVersions,
			v1alpha1.RolledBackVersion{UID: "uid-old", ResourceVersion: fmt.Sprint(i), Key: "k", Validator: "yaml", Nodes: []string{"gone"}})
	}
	b.Synced("n2", Sync{Facts: Facts{State: rolledBack, NodeConfig: "nc", Records: assignedV1()}})
	b.Synced("n1", Sync{Facts: Facts{State: rolledBack, NodeConfig: "nc", Records: assignedV1()}})
	b.Synced("n3", Sync{Facts: Facts{State: rolledBack, NodeConfig: "nc", Records: assignedV1()}}) // not selected
	got := b.RolledBackVersions(nc, []string{"n1", "n2"})
	if len(got) != keptVersions || got[0].ResourceVersion != "1" {
		t.Fatalf("kept %d versions from resourceVersion %s, want %d from 1", len(got), got[0].ResourceVersion, keptVersions)
	}
	last := got[len(got)-1]
	if last.ResourceVersion != v1.ResourceVersion || !slices.Equal(last.Nodes, []string{"n1", "n2"}) {
		t.Fatalf("newest %+v, want v1 with n1 and n2", last)
	}
	if Failures(got, v1) != 2 {
		t.Errorf("failures of v1 %d, want 2", Failures(got, v1))
	}
	if len(nc.Status.RolledBackVersions[0].Nodes) != 1 {
		t.Error("the NodeConfig's own status was changed")
	}
}
