package controller

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeconfig.io/services/reconciler/internal/apis/v1alpha1"
)

func TestReconcileIntervalAnnotation(t *testing.T) {
	nc := func(v string, set bool) *v1alpha1.NodeConfig {
		n := &v1alpha1.NodeConfig{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
		if set {
			n.Annotations[v1alpha1.AnnotationReconcileInterval] = v
		}
		return n
	}
	for _, tc := range []struct {
		v    string
		set  bool
		want time.Duration
	}{
		{"", false, DefaultReconcileInterval},
		{"0", true, 0},
		{"30", true, 30 * time.Second},
		{"-5", true, DefaultReconcileInterval},
		{"soon", true, DefaultReconcileInterval},
	} {
		if got := reconcileInterval(nc(tc.v, tc.set)); got != tc.want {
			t.Errorf("interval %q = %v, want %v", tc.v, got, tc.want)
		}
	}
	if reconcileInterval(nil) != DefaultReconcileInterval {
		t.Error("no NodeConfig: want the default interval")
	}
}

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
