package main

import "testing"

func TestSelectionPicksExactlySelSpreadOverTheFleet(t *testing.T) {
	for _, c := range []struct{ n, sel int }{{5000, 1000}, {7, 3}, {10, 10}, {10, 1}, {3000, 2999}} {
		s := selection{n: c.n, sel: c.sel}
		count, gap := 0, 0
		for i := range c.n {
			if !s.selected(i) {
				gap++
				continue
			}
			count++
			// Evenly: never more unselected nodes in a row than n/sel.
			if gap > c.n/c.sel {
				t.Errorf("n=%d sel=%d: %d unselected nodes before node %d", c.n, c.sel, gap, i)
			}
			gap = 0
		}
		if gap > c.n/c.sel {
			t.Errorf("n=%d sel=%d: the last %d nodes are all unselected", c.n, c.sel, gap)
		}
		if count != c.sel {
			t.Errorf("n=%d sel=%d: %d selected", c.n, c.sel, count)
		}
	}
}

func TestOnlySelectedNodesRunStatusdWhenIdleRunWithout(t *testing.T) {
	s := selection{n: 10, sel: 2}
	all, some := s.withStatusd(false), s.withStatusd(true)
	running := 0
	for i := range 10 {
		if !all(i) {
			t.Errorf("node %d runs no statusd, though every node should", i)
		}
		if some(i) {
			running++
			if !s.selected(i) {
				t.Errorf("idle node %d runs a statusd", i)
			}
		}
	}
	if running != 2 {
		t.Errorf("%d statusds with the idle nodes without, want the 2 selected", running)
	}
}
