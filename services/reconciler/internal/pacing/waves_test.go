package pacing

import (
	"slices"
	"testing"
)

// Waves go by value, sorted as strings, whatever order the nodes come
// in; the nodes without the label ("") are one wave, the last.
func TestWaveOrderIsSortedWithTheUnlabelledLast(t *testing.T) {
	for _, tc := range []struct {
		values, want []string
	}{
		{[]string{"zone-c", "zone-a", "zone-b", "zone-a", "zone-c"}, []string{"zone-a", "zone-b", "zone-c"}},
		{[]string{"", "zone-b", "", "zone-a"}, []string{"zone-a", "zone-b", ""}},
		{[]string{"", ""}, []string{""}},
		{[]string{"b", "B", "10", "9"}, []string{"10", "9", "B", "b"}},
		{nil, []string{}},
	} {
		got := WaveOrder(slices.Values(tc.values))
		if !slices.Equal(got, tc.want) {
			t.Errorf("WaveOrder(%q) = %q, want %q", tc.values, got, tc.want)
		}
		for i := range got {
			for j := range got {
				if WaveBefore(got[i], got[j]) != (i < j) {
					t.Errorf("WaveBefore(%q, %q) = %v, want %v (order %q)", got[i], got[j], !(i < j), i < j, got)
				}
			}
		}
	}
}
