package pacing

import (
	"iter"
	"slices"
)

// A NodeConfig with a topologyKey rolls out in waves, one per value of
// that node label: the values sorted as strings (a stable order that every
// reconciler and reader computes alike), the nodes without the label
// ("", as an empty value) last, as one wave.

// Unlabelled is the value of the nodes without the label (or with an
// empty value): their wave is the last.
const Unlabelled = ""

// WaveBefore says whether the wave of value a rolls out before b's.
func WaveBefore(a, b string) bool {
	switch {
	case a == b, a == Unlabelled:
		return false
	case b == Unlabelled:
		return true
	}
	return a < b
}

// WaveOrder is the distinct values, in the order their waves roll out.
func WaveOrder(values iter.Seq[string]) []string {
	seen := map[string]bool{}
	order := []string{}
	for v := range values {
		if !seen[v] {
			seen[v] = true
			order = append(order, v)
		}
	}
	slices.SortFunc(order, func(a, b string) int {
		switch {
		case WaveBefore(a, b):
			return -1
		case WaveBefore(b, a):
			return 1
		}
		return 0
	})
	return order
}
