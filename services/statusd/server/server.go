// Package server is statusd as a library: it follows one node's records in
// checkpointd, runs the setter chain and patches that Node. The statusd
// binary is this plus flags and listeners; the fleet benchmark runs
// thousands of them in one process.
package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/statusd/internal/grpcapi"
	"nodeconfig.io/services/statusd/internal/nodeevents"
	"nodeconfig.io/services/statusd/internal/nodesync"
	"nodeconfig.io/services/statusd/internal/recordwatch"
	"nodeconfig.io/services/statusd/internal/reports"
	"nodeconfig.io/services/statusd/internal/setters"
)

// Options name the node and where its parts are.
type Options struct {
	Client   kubernetes.Interface
	NodeName string
	// Checkpointd is the node's checkpointd; Target names it in logs.
	Checkpointd nodeconfigv1.CheckpointServiceClient
	Target      string
	// StateFile keeps reported setter outputs across restarts.
	StateFile  string
	SyncPeriod time.Duration
	Registerer prometheus.Registerer // nil: no metrics
	Log        *slog.Logger
	// TellRollbacks records an Event on the Node for each rollback the
	// node does by itself (internal/nodeevents).
	TellRollbacks bool
}

// Statusd is one node's status pipeline.
type Statusd struct {
	follower *recordwatch.Follower
	syncer   *nodesync.Syncer
	api      *grpcapi.Service
	teller   *nodeevents.Teller
	changed  chan struct{}
	log      *slog.Logger
}

// New builds the pipeline; Run starts it.
func New(o Options) (*Statusd, error) {
	store, err := reports.Open(o.StateFile)
	if err != nil {
		return nil, err
	}
	s := &Statusd{log: o.Log, changed: make(chan struct{}, 1)}
	if o.TellRollbacks {
		s.teller = &nodeevents.Teller{Client: o.Client, Node: o.NodeName, Log: o.Log}
	}
	s.follower = recordwatch.New(o.Checkpointd, o.Target, o.Log, func() {
		s.syncer.Trigger()
		select {
		case s.changed <- struct{}{}:
		default:
		}
	})
	chain := func() []setters.Named {
		list := []setters.Named{
			{Name: "ConfigStatus", Builtin: true, Set: setters.ConfigStatus(s.follower.Records)},
			{Name: v1alpha1.NodeConditionConfigReady, Builtin: true, Set: setters.NodeConfigReady(s.follower.Records)},
		}
		for _, name := range store.Names() {
			list = append(list, setters.Named{Name: name, Set: setters.Reported(func() ([]metav1.Condition, []string) { return store.Conditions(name) })})
		}
		return list
	}
	s.syncer = nodesync.New(nodesync.Options{
		Client: o.Client, NodeName: o.NodeName, Setters: chain, SyncPeriod: o.SyncPeriod,
		Settling: func() bool { return setters.Activating(s.follower.Records) }, Registerer: o.Registerer, Log: o.Log,
	})
	s.api = &grpcapi.Service{
		NodeName: o.NodeName, Reports: store, Syncer: s.syncer, Setters: chain, Records: s.follower.Records,
	}
	return s, nil
}

// Register adds the StatusService to g.
func (s *Statusd) Register(g *grpc.Server) { nodeconfigv1.RegisterStatusServiceServer(g, s.api) }

// Run follows the records and syncs the Node until ctx ends or the sync
// cannot go on.
func (s *Statusd) Run(ctx context.Context) error {
	go s.follower.Run(ctx)
	if s.teller != nil {
		go s.tellRollbacks(ctx)
	}
	err := s.syncer.Run(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// tellRollbacks tells of the node's own rollbacks as its records change.
func (s *Statusd) tellRollbacks(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.changed:
		}
		if recs, err := s.follower.Records(); err == nil {
			s.teller.Observe(ctx, recs)
		}
	}
}
