package controller

import (
	"testing"
	"time"
)

func TestRetryDelaysDoubleJitteredAndCapped(t *testing.T) {
	rl := newRateLimiter(2*time.Second, 2*time.Minute)
	prevMax := time.Duration(0)
	for i := range 12 {
		d := rl.When("node")
		ideal := min(2*time.Second<<i, 2*time.Minute)
		if d < ideal*4/5 || d > ideal {
			t.Fatalf("failure %d: delay %v outside [0.8, 1.0] of %v", i+1, d, ideal)
		}
		prevMax = max(prevMax, d)
	}
	if prevMax > 2*time.Minute {
		t.Fatalf("delay %v over the 2 min cap", prevMax)
	}
	rl.Forget("node")
	if d := rl.When("node"); d > 2*time.Second {
		t.Fatalf("after Forget the delay is %v, want the base again", d)
	}
}
