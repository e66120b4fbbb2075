package policy

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
)

// behind is how far the node's clock trails the reconciler's.
const behind = 50 * time.Millisecond

// A node whose clock trails the reconciler's by a few milliseconds is
// promoted at the sync its soak asked for, without a failure, an event or
// a backoff on the way.
func TestSoakEndToleratesANodeClockBehindTheReconcilers(t *testing.T) {
	t.Run("at the requested sync", func(t *testing.T) {
		f := newFake(t0)
		first := Sync(context.Background(), f, use("1"), t0)
		at := t0.Add(first.RequeueAfter)
		f.clock = at.Add(-behind)
		r := Sync(context.Background(), f, use("1"), at)
		if r.Err != nil || r.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ACTIVE || !hasEvent(r, v1alpha1.EventConfigPromoted) ||
			!records.SameSource(f.recs.GetLastKnownGood().GetSource(), src("1")) {
			t.Fatalf("sync %v after the assignment, node clock %v behind: state %v, err %v, events %v; want ACTIVE and promoted",
				first.RequeueAfter, behind, r.State, r.Err, r.Events)
		}
	})
	t.Run("woken at the soak end", func(t *testing.T) {
		f := newFake(t0)
		Sync(context.Background(), f, use("1"), t0)
		end := t0.Add(600 * time.Second)
		f.clock = end.Add(-behind)
		r := Sync(context.Background(), f, use("1"), end)
		if r.Err != nil || r.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_SOAKING || len(r.Events) != 0 ||
			r.RequeueAfter != soakEndSlack || f.recs.GetLastKnownGood() != nil {
			t.Fatalf("node still soaking by its clock: state %v, err %v, events %v, requeue %v; want SOAKING, no error, no event, a look again in %v",
				r.State, r.Err, r.Events, r.RequeueAfter, soakEndSlack)
		}
		next := end.Add(r.RequeueAfter)
		f.clock = next.Add(-behind)
		r = Sync(context.Background(), f, use("1"), next)
		if r.Err != nil || r.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_ACTIVE || !hasEvent(r, v1alpha1.EventConfigPromoted) {
			t.Fatalf("the retry: state %v, err %v, events %v; want ACTIVE and promoted", r.State, r.Err, r.Events)
		}
	})
}

// Only a node's clock trailing by less than maxClockSkew is tolerated: a
// clock further behind, or any other refusal or failure of the promote, is
// an error retried with backoff, as before.
func TestPromoteFailuresOtherThanASmallSkewStayErrors(t *testing.T) {
	end := t0.Add(600 * time.Second)
	for name, c := range map[string]struct {
		now        time.Time // the reconciler's
		clock      time.Time // the node's
		promoteErr error
		want       string // in the error
	}{
		"node clock far behind": {now: end.Add(maxClockSkew), clock: end.Add(-time.Second), want: "is soaking until"},
		"other refusal": {now: end, promoteErr: status.Error(codes.FailedPrecondition,
			"cannot promote: ns/cm key k (uid u, resourceVersion 1) has a late error: the kubelet turned unhealthy"), want: "has a late error"},
		"store failure": {now: end, promoteErr: status.Error(codes.Internal, "store: disk I/O error"), want: "disk I/O error"},
		"agent down":    {now: end, promoteErr: errDown, want: "connection refused"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t0)
			Sync(context.Background(), f, use("1"), t0)
			f.clock, f.promoteErr = c.clock, c.promoteErr
			r := Sync(context.Background(), f, use("1"), c.now)
			if r.Err == nil || !strings.Contains(r.Err.Error(), c.want) || r.State != nodeconfigv1.LifecycleState_LIFECYCLE_STATE_FAILING {
				t.Fatalf("state %v, err %v; want FAILING with an error that says %q", r.State, r.Err, c.want)
			}
		})
	}
}
