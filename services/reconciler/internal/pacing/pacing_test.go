package pacing

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestMaxInTrial(t *testing.T) {
	pct := func(s string) *intstr.IntOrString { v := intstr.FromString(s); return &v }
	num := func(n int) *intstr.IntOrString { v := intstr.FromInt32(int32(n)); return &v }
	for _, tc := range []struct {
		v        *intstr.IntOrString
		selected int
		want     int
	}{
		{nil, 10, 1}, {nil, 11, 2}, {nil, 1000, 100}, {nil, 0, 1}, {num(2), 10, 2}, {pct("25%"), 10, 3}, {pct("1%"), 10, 1}, {pct("100%"), 7, 7}, {num(0), 5, 1},
	} {
		if got := MaxInTrial(tc.v, tc.selected); got != tc.want {
			t.Errorf("MaxInTrial(%v, %d) = %d, want %d", tc.v, tc.selected, got, tc.want)
		}
	}
}

func TestHalted(t *testing.T) {
	one := int32(1)
	zero := int32(0)
	if MaxFailures(nil) != 1 || !Halted(1, MaxFailures(&one)) || Halted(0, 1) || Halted(5, MaxFailures(&zero)) {
		t.Fatal("halt rules broken")
	}
}
