package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/test/framework/grpcspy"
	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/framework/sim"
	"nodeconfig.io/test/framework/storefile"
)

// "Assigned only updates in the status after the record has been
// checkpointed to disk." Every state checkpointd ever records has the
// payload of its assigned config on disk: read from the store file by this
// process once checkpointd stopped, not asked of checkpointd. checkpointd
// is killed the moment its watch shows the last assignment: a payload
// acknowledged before it is written, and written a little later, is not
// in the file yet.
func TestAssignedOnlyAfterCheckpointOnDisk(t *testing.T) {
	e := newEnv(t, 1)
	n := e.nodes[0]
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	stream, err := n.Checkpoint().WatchRecords(ctx, &nodeconfigv1.WatchRecordsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan *nodeconfigv1.Records, 64)
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				close(seen)
				return
			}
			seen <- resp.GetRecords()
		}
	}()
	var want []string
	payloads := []string{goodYAML, "maxPods: 50\n", "maxPods: 60\n"}
	for i, payload := range payloads {
		cm := e.configMap("cfg", map[string]string{"config.yaml": payload})
		want = append(want, cm.ResourceVersion)
		if i == 0 {
			e.use(e.label, "cfg", nil)
		}
		if i == len(payloads)-1 {
			break
		}
		e.waitNode(n.Name, 20*time.Second, "active", func(st corev1.NodeConfigStatus, _ *corev1.NodeCondition) bool {
			return rv(st.Active) == cm.ResourceVersion
		})
	}
	var recorded []*nodeconfigv1.Records
	last, deadline := want[len(want)-1], time.After(20*time.Second)
	for len(recorded) == 0 || recorded[len(recorded)-1].GetAssigned().GetSource().GetResourceVersion() != last {
		select {
		case recs, ok := <-seen:
			if !ok {
				t.Fatalf("checkpointd's watch ended before it recorded resourceVersion %s assigned", last)
			}
			recorded = append(recorded, recs)
		case <-deadline:
			t.Fatalf("checkpointd never recorded resourceVersion %s assigned", last)
		}
	}
	// Killed, checkpointd records nothing more (its watch ends) and
	// releases the store file's lock; what it committed is in the file.
	// It is started again for the cleanup's reset.
	n.Checkpointd.Kill()
	onDisk, err := storefile.Payloads(filepath.Join(n.Dir, "state", "checkpoints.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Checkpointd.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := proc.WaitFor(10*time.Second, func() (bool, error) {
		_, err := n.Checkpoint().GetRecords(e.ctx, &nodeconfigv1.GetRecordsRequest{})
		return err == nil, err
	}); err != nil {
		t.Fatalf("checkpointd started again does not answer: %v", err)
	}
	for recs := range seen {
		recorded = append(recorded, recs)
	}
	assignedSeen := map[string]bool{}
	for _, recs := range recorded {
		a := recs.GetAssigned().GetSource()
		if a == nil {
			continue
		}
		assignedSeen[a.GetResourceVersion()] = true
		p, ok := onDisk[a.GetUid()+"/"+a.GetResourceVersion()]
		if !ok {
			t.Fatalf("revision %d assigns %s/%s, whose payload is not in the store file", recs.GetRevision(), a.GetUid(), a.GetResourceVersion())
		}
		// The order too: the checkpoint was stored before the assignment
		// naming it was recorded (both stamped by the node's store).
		if assigned := recs.GetAssigned().GetWrittenAt().AsTime(); p.StoredAt.After(assigned) {
			t.Fatalf("resourceVersion %s was assigned at %v, before its checkpoint was stored at %v", a.GetResourceVersion(), assigned, p.StoredAt)
		}
	}
	for _, v := range want {
		if !assignedSeen[v] {
			t.Fatalf("never saw resourceVersion %s assigned (saw %v)", v, assignedSeen)
		}
	}
}

// "This is currently implemented as a 10-minute soak period starting when
// the local record of Assigned config is updated." A SIGKILL of every
// service mid-soak does not move the start: it is the durable write time.
// The node's agent, which the reconcilers reach through a spy, is asked to
// promote once: not before the soak's durable end, and before a soak
// started again at the restart would end.
func TestRestartsMidSoakDoNotResetTheSoakClock(t *testing.T) {
	const soak = 10 * time.Second
	e := newNodes(t, 1, func(int) sim.NodeOptions { return sim.NodeOptions{} })
	n := e.nodes[0]
	spy := grpcspy.Start(t, "unix://"+n.Socket)
	through := []string{"--agent-address", n.Name + "=" + spy.Target}
	e.startReconciler("r0", through...)
	cm := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(soak / time.Second)})
	e.waitNode(n.Name, 20*time.Second, "soaking", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.Active) == cm.ResourceVersion && reasonIs(c, "Soaking")
	})
	assigned := proto.Clone(e.records(0).GetAssigned()).(*nodeconfigv1.AssignedRecord)
	active := proto.Clone(e.records(0).GetActive()).(*nodeconfigv1.SourceRecord)
	wantEnd := active.GetWrittenAt().AsTime().Add(soak)
	// Half-way through: a soak started again at the restart would end half
	// a soak after the durable one.
	time.Sleep(time.Until(wantEnd.Add(-soak / 2)))
	if time.Now().After(wantEnd.Add(-soak / 4)) {
		t.Fatalf("the soak is at %v of %v before the kill: too late to tell a restarted soak apart on this machine", soak-time.Until(wantEnd), soak)
	}

	killed := time.Now()
	e.reconciler.Kill()
	n.Statusd.Kill()
	n.Checkpointd.Kill()
	for _, p := range []interface{ Restart() error }{n.Checkpointd, n.Statusd} {
		if err := p.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	if err := proc.WaitFor(10*time.Second, func() (bool, error) {
		_, err := n.Checkpoint().GetRecords(e.ctx, &nodeconfigv1.GetRecordsRequest{})
		return err == nil, err
	}); err != nil {
		t.Fatal(err)
	}
	e.reconciler = nil
	e.startReconciler("r1", through...)

	if got := e.records(0).GetAssigned(); !proto.Equal(got, assigned) {
		t.Fatalf("assigned record changed across restarts:\nbefore %v\nafter  %v", assigned, got)
	}
	if got := e.records(0).GetActive(); !proto.Equal(got, active) {
		t.Fatalf("active record changed across restarts:\nbefore %v\nafter  %v", active, got)
	}
	if err := proc.WaitFor(soak+20*time.Second, func() (bool, error) {
		return e.records(0).GetLastKnownGood() != nil, nil
	}); err != nil {
		t.Fatalf("never promoted: %v", err)
	}
	lkg := e.records(0).GetLastKnownGood()
	if lkg.GetWrittenAt().AsTime().Before(wantEnd) {
		t.Fatalf("promoted at %v, before the soak ended at %v", lkg.GetWrittenAt().AsTime(), wantEnd)
	}
	e.resync(n.Name, 20*time.Second)
	promotions := spy.Calls(nodeconfigv1.CheckpointService_PromoteLastKnownGood_FullMethodName)
	if len(promotions) != 1 {
		t.Fatalf("the node's agent was asked to promote %d times (%v), want once", len(promotions), promotions)
	}
	restarted := killed.Add(soak)
	if at := promotions[0].At; at.Before(wantEnd) || !at.Before(restarted) {
		t.Fatalf("the node's agent was asked to promote at %v; want at the soak's durable end %v, before a soak started again at the kill would end (%v)", at, wantEnd, restarted)
	}
}

// "If the Assigned config is Active at the end of this period, it becomes
// the LastKnownGood" — and a config that failed during its trial never does.
func TestConfigThatFailsDuringSoakIsNotPromoted(t *testing.T) {
	e := newEnv(t, 1)
	node := e.nodes[0].Name
	first := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(30)})
	e.waitNode(node, 20*time.Second, "soaking", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.Active) == first.ResourceVersion && reasonIs(c, "Soaking")
	})
	bad := e.configMap("cfg", map[string]string{"config.yaml": badYAML})
	e.waitNode(node, 20*time.Second, "rolled back to the local default", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.Assigned) == bad.ResourceVersion && st.Active == nil && st.LastKnownGood == nil && reasonIs(c, "RolledBack")
	})
	if err := e.nodes[0].WaitTargetGone(10 * time.Second); err != nil {
		t.Fatalf("target file still exists; the local default means no file: %v", err)
	}
}

// "Note that if Spec.ConfigSource is reset to nil (use local defaults), the
// LastKnownGood is also immediately reset to nil."
func TestNilSourceResetsLastKnownGoodImmediately(t *testing.T) {
	e := newEnv(t, 1)
	node := e.nodes[0].Name
	cm := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.use(e.label, "cfg", nil)
	e.waitNode(node, 20*time.Second, "promoted", func(st corev1.NodeConfigStatus, _ *corev1.NodeCondition) bool {
		return rv(st.LastKnownGood) == cm.ResourceVersion
	})
	e.nodeConfig(e.label, map[string]any{"soakSeconds": int64(2)}, nil)
	e.waitNode(node, 20*time.Second, "reset", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return st.Assigned == nil && st.Active == nil && st.LastKnownGood == nil && reasonIs(c, "LocalDefault")
	})
	if err := e.nodes[0].WaitTargetGone(10 * time.Second); err != nil {
		t.Fatalf("target file still exists after the reset: %v", err)
	}
}

// A ConfigMap edit gives a new resourceVersion: a new checkpoint and a new
// trial, while the old last-known-good stays until the new one is promoted.
func TestConfigMapEditStartsNewTrialKeepingOldLastKnownGood(t *testing.T) {
	e := newEnv(t, 1)
	node := e.nodes[0].Name
	v1 := e.configMap("cfg", map[string]string{"config.yaml": goodYAML})
	e.use(e.label, "cfg", map[string]any{"soakSeconds": int64(4)})
	e.waitNode(node, 20*time.Second, "v1 promoted", func(st corev1.NodeConfigStatus, _ *corev1.NodeCondition) bool {
		return rv(st.LastKnownGood) == v1.ResourceVersion
	})
	v2 := e.configMap("cfg", map[string]string{"config.yaml": "maxPods: 90\n"})
	e.waitNode(node, 20*time.Second, "v2 on trial, v1 still last-known-good", func(st corev1.NodeConfigStatus, c *corev1.NodeCondition) bool {
		return rv(st.Active) == v2.ResourceVersion && rv(st.LastKnownGood) == v1.ResourceVersion && reasonIs(c, "Soaking")
	})
	list, err := e.nodes[0].Checkpoint().ListCheckpoints(e.ctx, &nodeconfigv1.ListCheckpointsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetCheckpoints()) < 2 {
		t.Fatalf("want checkpoints of both versions, have %v", list.GetCheckpoints())
	}
	e.waitNode(node, 20*time.Second, "v2 promoted", func(st corev1.NodeConfigStatus, _ *corev1.NodeCondition) bool {
		return rv(st.LastKnownGood) == v2.ResourceVersion
	})
}
