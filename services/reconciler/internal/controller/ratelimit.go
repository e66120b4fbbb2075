package controller

import (
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
)

// newRateLimiter is the per-node retry policy of an early error: exponential from
// base doubling to max, jittered so that a fleet failing together does not
// retry together, combined with an overall token bucket that protects the
// agents and the API server during mass failures.
func newRateLimiter(base, max time.Duration) workqueue.TypedRateLimiter[string] {
	return workqueue.NewTypedMaxOfRateLimiter(
		jittered{workqueue.NewTypedItemExponentialFailureRateLimiter[string](base, max)},
		&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(200), 1000)},
	)
}

// jittered spreads each delay over [0.8, 1.0] of itself, so the cap holds.
type jittered struct {
	workqueue.TypedRateLimiter[string]
}

func (j jittered) When(item string) time.Duration {
	return wait.Jitter(j.TypedRateLimiter.When(item)*4/5, 0.25)
}
