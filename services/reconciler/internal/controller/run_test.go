package controller

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/util/workqueue"
)

// A failed sync is retried by the queue's rate limiter unless it took its
// delay itself; a sync that succeeds forgets the key's failures and comes
// back after the delay it asks for.
func TestProcessNextRetriesFailuresAndSchedulesTheNextSync(t *testing.T) {
	f := newFixture(t)
	q := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Hour, time.Hour))
	defer q.ShutDown()
	run := func(key string, after time.Duration, err error) {
		t.Helper()
		q.Add(key)
		if !f.c.processNext(context.Background(), "nodes", q, func(_ context.Context, got string) (time.Duration, error) {
			if got != key {
				t.Fatalf("synced %q, want %q", got, key)
			}
			return after, err
		}) {
			t.Fatal("processNext stopped on a running queue")
		}
	}
	failed := errors.New("agent unavailable")

	run("a", 0, failed)
	if n := q.NumRequeues("a"); n != 1 {
		t.Errorf("a failure without a delay: %d rate-limited retries, want 1", n)
	}
	run("b", time.Hour, failed)
	if n := q.NumRequeues("b"); n != 0 {
		t.Errorf("a failure that took its own delay went through the rate limiter too (%d retries)", n)
	}
	run("a", 0, fmt.Errorf("ConfigMap ns/cfg: %w", errWaits))
	if n := q.NumRequeues("a"); n != 1 {
		t.Errorf("a sync that waited left %d failures of the key, want the 1 before it", n)
	}
	run("a", 0, nil)
	if n := q.NumRequeues("a"); n != 0 {
		t.Errorf("a success kept %d failures of the key", n)
	}
	if n := q.Len(); n != 0 {
		t.Errorf("%d keys ready at once, want none: every retry and next sync waits", n)
	}
	if errs, oks := testutil.ToFloat64(f.c.metrics.syncs.WithLabelValues("nodes", "error")), testutil.ToFloat64(f.c.metrics.syncs.WithLabelValues("nodes", "ok")); errs != 2 || oks != 1 {
		t.Errorf("syncs counted %v failed and %v ok, want 2 and 1", errs, oks)
	}
	if waited := testutil.ToFloat64(f.c.metrics.syncs.WithLabelValues("nodes", "waiting")); waited != 1 {
		t.Errorf("syncs counted %v waiting, want 1", waited)
	}

	q.ShutDown()
	if f.c.processNext(context.Background(), "nodes", q, nil) {
		t.Error("processNext went on after the queue shut down")
	}
}
