package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
)

// holdingPool hands out the fixture's agents, but a GetRecords of a held
// node waits until it is let go, so a test can keep a sync under way.
type holdingPool struct {
	*fakePool
	entered chan struct{} // one value per GetRecords that got held
	release chan struct{} // closed to let the held calls go on
}

func (p *holdingPool) For(node string) (nodeconfigv1.CheckpointServiceClient, func(), error) {
	a, release, err := p.fakePool.For(node)
	if err != nil {
		return nil, nil, err
	}
	return &heldAgent{CheckpointServiceClient: a, pool: p}, release, nil
}

type heldAgent struct {
	nodeconfigv1.CheckpointServiceClient
	pool *holdingPool
}

func (a *heldAgent) GetRecords(ctx context.Context, r *nodeconfigv1.GetRecordsRequest, opts ...grpc.CallOption) (*nodeconfigv1.GetRecordsResponse, error) {
	a.pool.entered <- struct{}{}
	select {
	case <-a.pool.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return a.CheckpointServiceClient.GetRecords(ctx, r, opts...)
}

func (f *fixture) syncCounts(node string) (ended, started uint64) {
	f.t.Helper()
	info, ok := f.c.NodeInfo(node)
	if !ok {
		f.t.Fatalf("node %s unknown to the controller", node)
	}
	return info.Syncs, info.SyncsStarted
}

// A Resync is waited for by its ticket, the syncs begun when it was asked:
// a sync under way during the Resync, which began before it and ends
// after it, does not pass the ticket (it passed the old wait, on the
// ended syncs read before the Resync); the sync the Resync queued does.
func TestResyncTicketIsPassedOnlyByASyncBegunAfterIt(t *testing.T) {
	f := newFixture(t)
	f.addNode("n1", nil)
	if err := f.syncNode("n1"); err != nil {
		t.Fatal(err)
	}
	if ended, started := f.syncCounts("n1"); ended != 1 || started != 1 {
		t.Fatalf("after one sync: %d ended, %d begun; want 1 and 1", ended, started)
	}
	before, _ := f.syncCounts("n1")

	pool := &holdingPool{fakePool: f.agents, entered: make(chan struct{}, 1), release: make(chan struct{})}
	f.c.o.Agents = pool
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := f.c.syncNode(ctx, "n1"); done <- err }()
	select {
	case <-pool.entered:
	case <-ctx.Done():
		t.Fatal("the sync never reached the agent")
	}
	if ended, started := f.syncCounts("n1"); ended != 1 || started != 2 {
		t.Fatalf("a sync under way: %d ended, %d begun; want 1 and 2", ended, started)
	}
	ticket := f.c.Resync("n1")
	if ticket != 2 {
		t.Fatalf("Resync's ticket %d, want 2 (the sync under way counted)", ticket)
	}
	close(pool.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ended, _ := f.syncCounts("n1")
	if ended <= before {
		t.Fatalf("the sync under way ended but the count stayed at %d", ended)
	}
	if ended > ticket {
		t.Fatalf("%d syncs ended, past the ticket %d, though none began after the Resync", ended, ticket)
	}

	// The sync the Resync queued, as a worker runs it.
	if !f.c.processNext(ctx, "nodes", f.c.nodeQ, f.c.syncNode) {
		t.Fatal("the queue shut down")
	}
	if ended, started := f.syncCounts("n1"); ended != ticket+1 || started != ticket+1 {
		t.Fatalf("after the queued sync: %d ended, %d begun; want %d and %d", ended, started, ticket+1, ticket+1)
	}
}

// A sync that ends early with an error, before it records anything, is
// counted as ended too: otherwise the begun count would stay ahead and a
// later ticket would wait for syncs that never come.
func TestSyncEndingEarlyIsCountedAsEnded(t *testing.T) {
	f := newFixture(t)
	f.addNode("n1", map[string]string{"pool": "a"})
	if err := f.syncNode("n1"); err != nil {
		t.Fatal(err)
	}
	// Abandoned by a deleted NodeConfig, then selected by a live one: the
	// sync first clears the mark, and the API refuses.
	obj, _, _ := f.nodes.GetByKey("n1")
	n := obj.(*metav1.PartialObjectMetadata).DeepCopy()
	n.Annotations = map[string]string{v1alpha1.AnnotationAbandoned: "nc-old"}
	if err := f.nodes.Update(n); err != nil {
		t.Fatal(err)
	}
	f.addConfigMap("ns", "cfg", "1", map[string]string{"k": "a: 1"})
	f.setNodeConfig(poolA("nc", v1alpha1.Rollout{}))
	f.kube.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("the API server is away")
	})
	if err := f.syncNode("n1"); err == nil || err.Error() != "the API server is away" {
		t.Fatalf("the sync ended with %v, want the refused patch of the abandon mark", err)
	}
	if ended, started := f.syncCounts("n1"); ended != 2 || started != 2 {
		t.Fatalf("after a sync that ended early: %d ended, %d begun; want 2 and 2", ended, started)
	}
}

// A sync that waits for the node's ConfigMap's first listing has not run
// to its end: it does not pass a Resync's ticket (the node's state it
// would show is the one from before), the sync after the listing does.
func TestSyncWaitingForTheListingDoesNotPassTheTicket(t *testing.T) {
	f := newFixture(t)
	listed := false
	f.c.o.ConfigMapListed = func(string, string) bool { return listed }
	f.addNode("n1", map[string]string{"pool": "a"})
	if err := f.syncNode("n1"); err != nil { // no NodeConfig yet
		t.Fatal(err)
	}
	f.addConfigMap("ns", "cfg", "1", map[string]string{"k": "a: 1"})
	f.setNodeConfig(poolA("pool-a", v1alpha1.Rollout{}))
	drain(f.c.nodeQ)
	ticket := f.c.Resync("n1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !f.c.processNext(ctx, "nodes", f.c.nodeQ, f.c.syncNode) {
		t.Fatal("the queue shut down")
	}
	if ended, started := f.syncCounts("n1"); ended > ticket || started != ticket+1 {
		t.Fatalf("after a sync that waited: the last completed is sync %d of %d begun; want none past the ticket %d", ended, started, ticket)
	}
	listed = true
	if err := f.syncNode("n1"); err != nil {
		t.Fatal(err)
	}
	if ended, started := f.syncCounts("n1"); ended != ticket+2 || started != ticket+2 {
		t.Fatalf("after the sync past the listing: the last completed is sync %d of %d begun; want %d of %d", ended, started, ticket+2, ticket+2)
	}
}

// A deleted node's counts go with it.
func TestDeletedNodeForgetsItsSyncCounts(t *testing.T) {
	f := newFixture(t)
	f.addNode("n1", nil)
	if err := f.syncNode("n1"); err != nil {
		t.Fatal(err)
	}
	obj, _, _ := f.nodes.GetByKey("n1")
	if err := f.nodes.Delete(obj); err != nil {
		t.Fatal(err)
	}
	if err := f.syncNode("n1"); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.c.NodeInfo("n1"); ok {
		t.Fatal("a deleted node is still known")
	}
	if got := f.c.Resync("n1"); got != 0 {
		t.Fatalf("a deleted node's ticket is %d, want 0", got)
	}
}
