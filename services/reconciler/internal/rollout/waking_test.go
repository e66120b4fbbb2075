package rollout

import (
	"slices"
	"testing"
)

// A freed place wakes as many waiting nodes as the trial has places, not
// every waiting node: each woken node asks its agent.
func TestAFreedPlaceWakesAsManyWaitingNodesAsThereArePlaces(t *testing.T) {
	b := newBook()
	nc := nodeConfig("pool-a", 2)
	nodes := []string{"n1", "n2", "n3", "n4", "n5"}
	setState(b, "n1", "pool-a", soaking)
	for _, n := range nodes[1:] {
		setState(b, n, "pool-a", waiting)
	}
	if got := b.Waking("pool-a", nc, len(nodes), nil); len(got) != 1 || got[0] == "n1" {
		t.Fatalf("one free place of two woke %v, want one waiting node", got)
	}
	setState(b, "n1", "pool-a", active) // its soak ended
	if got := b.Waking("pool-a", nc, len(nodes), nil); len(got) != 2 || slices.Contains(got, "n1") {
		t.Fatalf("two free places woke %v, want two waiting nodes", got)
	}
	setState(b, "n2", "pool-a", soaking)
	setState(b, "n3", "pool-a", soaking)
	if got := b.Waking("pool-a", nc, len(nodes), nil); len(got) != 0 {
		t.Fatalf("a full trial woke %v", got)
	}
}

// A node held back while it leaves a NodeConfig is woken by that
// NodeConfig's freed place, and no longer once it has left.
func TestWakingFollowsTheNodeConfigANodeLeaves(t *testing.T) {
	b := newBook()
	setState(b, "n1", "", waiting)
	b.Depart(nodeConfig("old", 1), "n1", Ask{Held: "Paused"})
	if got := b.Waking("old", nil, 0, nil); len(got) != 1 || got[0] != "n1" {
		t.Fatalf("the freed place of old woke %v, want n1", got)
	}
	b.Synced("n1", Sync{Facts: Facts{State: waiting}, Following: true}) // selected again
	if got := b.Waking("old", nil, 0, nil); len(got) != 0 {
		t.Fatalf("after n1 left old, its freed place woke %v", got)
	}
}
