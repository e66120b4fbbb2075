package controller

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/metadata/metadatalister"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	nodeconfigfake "nodeconfig.io/services/api/client/clientset/fake"
	nodeconfiglisters "nodeconfig.io/services/api/client/listers/api/v1alpha1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/rollout"
)

// fixture is a controller over fake clients and hand-filled caches (after
// sample-controller's controller_test): each test puts objects in the
// caches, runs one sync function, and checks what it did to the fake
// agents and the API.
type fixture struct {
	t        testing.TB
	c        *Controller
	kube     *kubefake.Clientset
	api      *nodeconfigfake.Clientset
	nodes    cache.Indexer
	cms      cache.Indexer
	ncs      cache.Indexer
	agents   *fakePool
	recorder *record.FakeRecorder
	now      time.Time
	// ncVersion is the last resourceVersion a cached NodeConfig got.
	ncVersion int
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	f := &fixture{
		t:        t,
		kube:     kubefake.NewClientset(),
		api:      nodeconfigfake.NewSimpleClientset(),
		nodes:    cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		cms:      cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}),
		ncs:      cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		agents:   &fakePool{agents: map[string]*fakeAgent{}},
		recorder: record.NewFakeRecorder(100),
		now:      time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC),
	}
	f.c = New(Options{
		Kube: f.kube, NodeConfigClient: f.api,
		Nodes: metadatalister.New(f.nodes, corev1.SchemeGroupVersion.WithResource("nodes")), ConfigMaps: corelisters.NewConfigMapLister(f.cms),
		NodeConfigs: nodeconfiglisters.NewNodeConfigLister(f.ncs),
		Agents:      f.agents, Recorder: f.recorder,
		Now: func() time.Time { return f.now },
	})
	t.Cleanup(func() { f.c.nodeQ.ShutDown(); f.c.ncQ.ShutDown() })
	return f
}

func (f *fixture) addNode(name string, labels map[string]string) *fakeAgent {
	f.t.Helper()
	n := nodeMeta(metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: labels})
	if err := f.nodes.Add(n); err != nil {
		f.t.Fatal(err)
	}
	f.c.nodesChanged()
	a := &fakeAgent{recs: &nodeconfigv1.Records{}, now: func() time.Time { return f.now }}
	f.agents.mu.Lock()
	f.agents.agents[name] = a
	f.agents.mu.Unlock()
	return a
}

// nodeMeta is a Node as the reconciler caches it: its metadata alone.
func nodeMeta(m metav1.ObjectMeta) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}, ObjectMeta: m}
}

func (f *fixture) addConfigMap(ns, name, rv string, data map[string]string) *corev1.ConfigMap {
	f.t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), ResourceVersion: rv}, Data: data}
	if err := f.cms.Update(cm); err != nil {
		f.t.Fatal(err)
	}
	return cm
}

// setNodeConfig puts a NodeConfig in the cache, at a new resourceVersion
// as an informer would have it, and in the fake API.
func (f *fixture) setNodeConfig(nc *v1alpha1.NodeConfig) {
	f.t.Helper()
	nc.APIVersion, nc.Kind = "nodeconfig.io/v1alpha1", "NodeConfig"
	if nc.UID == "" {
		nc.UID = types.UID("uid-" + nc.Name)
	}
	if nc.Generation == 0 {
		nc.Generation = 1
	}
	cached := nc.DeepCopy()
	f.ncVersion++
	cached.ResourceVersion = strconv.Itoa(f.ncVersion)
	f.cacheNodeConfig(cached)
	client := f.api.NodeConfigV1alpha1().NodeConfigs()
	if _, err := client.Get(context.Background(), nc.Name, metav1.GetOptions{}); err != nil {
		_, err = client.Create(context.Background(), nc.DeepCopy(), metav1.CreateOptions{})
		if err != nil {
			f.t.Fatal(err)
		}
	} else if _, err := client.Update(context.Background(), nc.DeepCopy(), metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

// cacheNodeConfig puts nc into the NodeConfig cache, as the reconciler's
// informer would.
func (f *fixture) cacheNodeConfig(nc *v1alpha1.NodeConfig) {
	f.t.Helper()
	if err := f.ncs.Update(nc); err != nil {
		f.t.Fatal(err)
	}
}

// storedNodeConfig reads the NodeConfig back from the fake API, as the
// status writes left it.
func (f *fixture) storedNodeConfig(name string) *v1alpha1.NodeConfig {
	f.t.Helper()
	nc, err := f.api.NodeConfigV1alpha1().NodeConfigs().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return nc
}

// setState gives a node a state on a NodeConfig in the node cache and the
// rollout book, as a sync's record does.
func (f *fixture) setState(name, nc string, state nodeconfigv1.LifecycleState) {
	f.t.Helper()
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	info := f.c.infoLocked(name)
	info.NodeConfig, info.State = nc, state
	f.c.book.Synced(name, rollout.Sync{Facts: rollout.Facts{State: state, NodeConfig: nc, Records: info.Records}})
}

func (f *fixture) syncNode(name string) error {
	f.t.Helper()
	_, err := f.c.syncNode(context.Background(), name)
	return err
}

func (f *fixture) syncNodeConfig(name string) {
	f.t.Helper()
	if _, err := f.c.syncNodeConfig(context.Background(), name); err != nil {
		f.t.Fatal(err)
	}
}

// events drains the recorded events.
func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

type fakePool struct {
	mu     sync.Mutex
	agents map[string]*fakeAgent
}

func (p *fakePool) For(node string) (nodeconfigv1.CheckpointServiceClient, func(), error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a, ok := p.agents[node]
	if !ok {
		return nil, nil, status.Error(codes.Unavailable, "no agent")
	}
	return a, func() {}, nil
}

func (p *fakePool) Forget(string) {}

// fakeAgent is an in-memory checkpointd that keeps the calls it got.
type fakeAgent struct {
	nodeconfigv1.CheckpointServiceClient
	mu        sync.Mutex
	now       func() time.Time
	recs      *nodeconfigv1.Records
	calls     []string
	puts      []*nodeconfigv1.PutCheckpointRequest
	previews  []*nodeconfigv1.PreviewConfigRequest
	lateError bool
	// putErr fails every PutCheckpoint with it (a full or read-only disk),
	// activateErr every Activate.
	putErr, activateErr error
}

// failPuts makes the agent's checkpoint writes fail with err (nil: succeed).
func (a *fakeAgent) failPuts(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.putErr = err
}

func (a *fakeAgent) call(name string) {
	a.calls = append(a.calls, name)
}

// Calls returns the calls so far that change something.
func (a *fakeAgent) writes() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, c := range a.calls {
		if c != "GetRecords" && c != "RepairDrift" {
			out = append(out, c)
		}
	}
	return out
}

func (a *fakeAgent) records() *nodeconfigv1.Records {
	a.mu.Lock()
	defer a.mu.Unlock()
	return proto.Clone(a.recs).(*nodeconfigv1.Records)
}

func (a *fakeAgent) ts() *timestamppb.Timestamp { return timestamppb.New(a.now()) }

func (a *fakeAgent) GetRecords(context.Context, *nodeconfigv1.GetRecordsRequest, ...grpc.CallOption) (*nodeconfigv1.GetRecordsResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.call("GetRecords")
	return &nodeconfigv1.GetRecordsResponse{Records: proto.Clone(a.recs).(*nodeconfigv1.Records)}, nil
}

// GetCheckpoint is recorded, so writes() shows a sync that looks one up.
func (a *fakeAgent) GetCheckpoint(context.Context, *nodeconfigv1.GetCheckpointRequest, ...grpc.CallOption) (*nodeconfigv1.GetCheckpointResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.call("GetCheckpoint")
	return nil, status.Error(codes.Unimplemented, "the reconciler sends a checkpoint without looking it up")
}

func (a *fakeAgent) PutCheckpoint(_ context.Context, r *nodeconfigv1.PutCheckpointRequest, _ ...grpc.CallOption) (*nodeconfigv1.PutCheckpointResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.call("PutCheckpoint")
	a.puts = append(a.puts, proto.Clone(r).(*nodeconfigv1.PutCheckpointRequest))
	if a.putErr != nil {
		return nil, a.putErr
	}
	return &nodeconfigv1.PutCheckpointResponse{Created: true}, nil
}

func (a *fakeAgent) SetAssigned(_ context.Context, r *nodeconfigv1.SetAssignedRequest, _ ...grpc.CallOption) (*nodeconfigv1.SetAssignedResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.call("SetAssigned")
	a.recs.Assigned = &nodeconfigv1.AssignedRecord{Source: r.GetSource(), SoakSeconds: r.GetSoakSeconds(), Validator: r.GetValidator(), WrittenAt: a.ts(), NodeConfig: r.GetNodeConfig()}
	a.recs.Error = nil
	return &nodeconfigv1.SetAssignedResponse{Records: proto.Clone(a.recs).(*nodeconfigv1.Records)}, nil
}

func (a *fakeAgent) Activate(context.Context, *nodeconfigv1.ActivateRequest, ...grpc.CallOption) (*nodeconfigv1.ActivateResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.call("Activate")
	if a.activateErr != nil {
		return nil, a.activateErr
	}
	if a.lateError {
		a.recs.Active = a.recs.GetLastKnownGood()
		a.recs.Error = &nodeconfigv1.ErrorRecord{Error: &nodeconfigv1.ConfigError{Phase: nodeconfigv1.ErrorPhase_ERROR_PHASE_LATE, Reason: "ValidationFailed", Message: "bad"}}
		return &nodeconfigv1.ActivateResponse{Outcome: nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ROLLED_BACK, Records: proto.Clone(a.recs).(*nodeconfigv1.Records)}, nil
	}
	if !records.SameSource(a.recs.GetActive().GetSource(), a.recs.GetAssigned().GetSource()) {
		a.recs.Active = &nodeconfigv1.SourceRecord{Source: a.recs.GetAssigned().GetSource(), WrittenAt: a.ts()}
	}
	a.recs.Error = nil
	return &nodeconfigv1.ActivateResponse{Outcome: nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ACTIVATED, Records: proto.Clone(a.recs).(*nodeconfigv1.Records)}, nil
}

func (a *fakeAgent) PromoteLastKnownGood(_ context.Context, r *nodeconfigv1.PromoteLastKnownGoodRequest, _ ...grpc.CallOption) (*nodeconfigv1.PromoteLastKnownGoodResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.call("Promote")
	a.recs.LastKnownGood = &nodeconfigv1.SourceRecord{Source: r.GetSource(), WrittenAt: a.ts()}
	return &nodeconfigv1.PromoteLastKnownGoodResponse{Records: proto.Clone(a.recs).(*nodeconfigv1.Records)}, nil
}

func (a *fakeAgent) SetError(_ context.Context, r *nodeconfigv1.SetErrorRequest, _ ...grpc.CallOption) (*nodeconfigv1.SetErrorResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.call("SetError")
	if r.GetError() == nil {
		a.recs.Error = nil
	} else if !proto.Equal(a.recs.GetError().GetError(), r.GetError()) {
		a.recs.Error = &nodeconfigv1.ErrorRecord{Error: r.GetError(), WrittenAt: a.ts()}
	}
	return &nodeconfigv1.SetErrorResponse{Records: proto.Clone(a.recs).(*nodeconfigv1.Records)}, nil
}

func (a *fakeAgent) Reset(_ context.Context, r *nodeconfigv1.ResetRequest, _ ...grpc.CallOption) (*nodeconfigv1.ResetResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.call("Reset")
	from := a.recs.GetAssigned().GetSource()
	a.recs = &nodeconfigv1.Records{LastReset: &nodeconfigv1.ResetRecord{From: from, At: a.ts(), SoakSeconds: r.GetSoakSeconds(), NodeConfig: r.GetNodeConfig()}}
	return &nodeconfigv1.ResetResponse{Records: proto.Clone(a.recs).(*nodeconfigv1.Records)}, nil
}

func (a *fakeAgent) RepairDrift(context.Context, *nodeconfigv1.RepairDriftRequest, ...grpc.CallOption) (*nodeconfigv1.RepairDriftResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.call("RepairDrift")
	return &nodeconfigv1.RepairDriftResponse{}, nil
}

// set makes node's agent a (nil: out of reach).
func (p *fakePool) set(node string, a *fakeAgent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if a == nil {
		delete(p.agents, node)
	} else {
		p.agents[node] = a
	}
}
