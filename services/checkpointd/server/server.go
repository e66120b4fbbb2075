// Package server is checkpointd as a library: one node's store, its
// lifecycle and garbage collection, ready to register on a gRPC server.
// The checkpointd binary is this plus flags and listeners; the fleet
// benchmark runs thousands of them in one process.
package server

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/checkpointd/internal/consumer"
	"nodeconfig.io/services/checkpointd/internal/grpcapi"
	"nodeconfig.io/services/checkpointd/internal/guard"
	"nodeconfig.io/services/checkpointd/internal/kubeletfiles"
	"nodeconfig.io/services/checkpointd/internal/lifecycle"
	"nodeconfig.io/services/checkpointd/internal/materialize"
	"nodeconfig.io/services/checkpointd/internal/store"
	"nodeconfig.io/services/configcheck/fieldpolicy"
	"nodeconfig.io/services/configcheck/kubeletcheck"
)

// Options say where a node's state and config live.
type Options struct {
	StateDir   string // holds checkpoints.db
	TargetDir  string // the active config is written here
	TargetFile string
	// NoSync skips fsync of the store and of the target file (tests and
	// benchmarks only).
	NoSync      bool
	MaxWatchers int
	Registerer  prometheus.Registerer // nil: no metrics
	Log         *slog.Logger
	// Rules are the node's own field policy and validator: none opt-in,
	// checked at every activation.
	Rules fieldpolicy.Rules
	// KubeletConfig is the kubelet's --config file: with it a kubelet
	// drop-in is judged merged with it and the other drop-ins of TargetDir.
	KubeletConfig string
	// LocateKubelet, when set, finds the kubelet's --config and
	// --config-dir in place of TargetDir, KubeletConfig and
	// GuardHostTargetDir (lifecycle.Options.Locate).
	LocateKubelet func() (kubeletfiles.Located, error)
	// Consumer, when set, restarts the file's consumer after every change
	// of the file and gates the soak on its health (RunConsumer).
	Consumer *consumer.Gate
	// GuardDir, when set, is the host-side start guard's directory
	// (internal/guard): the node keeps its trial there.
	GuardDir string
	// GuardRuntimeEndpoint is the container runtime's socket as the host
	// sees it: the guard counts no kubelet start while it is down.
	GuardRuntimeEndpoint string
	// GuardHostTargetDir is TargetDir as the host sees it (empty: the
	// same).
	GuardHostTargetDir string
	// Drainer, when set, drains the node before a change that needs it
	// (RunDrains); without it such a change is an early error.
	Drainer lifecycle.Drainer
}

// Checkpointd is an open store with its lifecycle.
type Checkpointd struct {
	store    *store.Store
	node     *lifecycle.Node
	consumer *consumer.Gate
}

// Open opens (or creates) the store and brings the target file in line
// with the active record, as at every start.
func Open(o Options) (*Checkpointd, error) {
	if err := os.MkdirAll(o.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("create state directory: %w", err)
	}
	st, err := store.Open(filepath.Join(o.StateDir, "checkpoints.db"), store.Options{NoSync: o.NoSync})
	if err != nil {
		return nil, err
	}
	lo := lifecycle.Options{
		Store:       st,
		Target:      materialize.Target{Dir: o.TargetDir, Name: o.TargetFile, NoSync: o.NoSync},
		Metrics:     lifecycle.NewMetrics(o.Registerer),
		Log:         o.Log,
		MaxWatchers: o.MaxWatchers,
		Rules:       &o.Rules,
		Drainer:     o.Drainer,
	}
	if o.LocateKubelet != nil {
		lo.Locate, lo.Target.Dir = o.LocateKubelet, ""
	} else if o.KubeletConfig != "" {
		lo.Kubelet = &kubeletcheck.NodeFiles{BaseConfig: o.KubeletConfig, DropInDir: o.TargetDir, Own: lo.Target.Path()}
	}
	if o.Consumer != nil { // a nil *Gate in the interface would not be nil
		lo.Consumer = o.Consumer
	}
	if o.GuardDir != "" {
		lo.Guard = &guard.Writer{Dir: o.GuardDir, NoSync: o.NoSync, RuntimeEndpoint: o.GuardRuntimeEndpoint}
		if o.GuardHostTargetDir != "" && o.LocateKubelet == nil {
			lo.Guard.HostTarget = filepath.Join(o.GuardHostTargetDir, o.TargetFile)
		}
	}
	node := lifecycle.New(lo)
	if o.Registerer != nil {
		o.Registerer.MustRegister(lifecycle.RecordsCollector{Store: st})
	}
	if o.Consumer != nil {
		o.Consumer.Lifecycle = lifecycle.ConsumerNode{Node: node}
	}
	if err := node.Recover(); err != nil {
		_ = st.Close()
		return nil, fmt.Errorf("recover the active config at start: %w", err)
	}
	return &Checkpointd{store: st, node: node, consumer: o.Consumer}, nil
}

// Register adds the CheckpointService to s.
func (c *Checkpointd) Register(s *grpc.Server) {
	nodeconfigv1.RegisterCheckpointServiceServer(s, grpcapi.New(c.node))
}

// RunGC sweeps unreferenced checkpoints every interval until ctx ends.
func (c *Checkpointd) RunGC(ctx context.Context, interval, minAge time.Duration) {
	c.node.RunGC(ctx, interval, minAge)
}

// RunConsumer drives the consumer gate until ctx ends; without a gate it
// returns at once.
func (c *Checkpointd) RunConsumer(ctx context.Context) {
	if c.consumer != nil {
		c.consumer.Run(ctx)
	}
}

// RunNodeFilesWatch judges the active config again when the node's own
// kubelet files change (lifecycle.Node.RunNodeFilesWatch), until ctx ends.
func (c *Checkpointd) RunNodeFilesWatch(ctx context.Context, period time.Duration) {
	c.node.RunNodeFilesWatch(ctx, period)
}

// RunDrains carries out the node's drains (lifecycle.Node.RunDrains) until
// ctx ends; without a Drainer it returns at once.
func (c *Checkpointd) RunDrains(ctx context.Context) { c.node.RunDrains(ctx) }

// Close closes the store.
func (c *Checkpointd) Close() error { return c.store.Close() }
