// Package recordwatch follows checkpointd's records over WatchRecords and
// keeps the latest state, reconnecting with capped backoff when the stream
// breaks.
package recordwatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// ErrNotConnected is returned before the first state arrives.
var ErrNotConnected = errors.New("not connected to checkpointd yet")

// Follower holds the latest records and whether checkpointd is reachable.
type Follower struct {
	client  nodeconfigv1.CheckpointServiceClient
	target  string
	log     *slog.Logger
	changed func()

	mu      sync.Mutex
	records *nodeconfigv1.Records
	err     error
}

// New builds a follower; changed is called after every change of state.
func New(client nodeconfigv1.CheckpointServiceClient, target string, log *slog.Logger, changed func()) *Follower {
	return &Follower{client: client, target: target, log: log, changed: changed, err: ErrNotConnected}
}

// Records returns the latest records, or why there are none.
func (f *Follower) Records() (*nodeconfigv1.Records, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	return f.records, nil
}

// Run follows until ctx ends.
func (f *Follower) Run(ctx context.Context) {
	newBackoff := func() wait.Backoff {
		return wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 7 * time.Second}
	}
	backoff := newBackoff()
	for ctx.Err() == nil {
		received, err := f.follow(ctx)
		if ctx.Err() != nil {
			return
		}
		if received {
			// The stream worked for a while: start the backoff over.
			backoff = newBackoff()
		}
		delay := backoff.Step()
		f.set(nil, fmt.Errorf("checkpointd at %s: %w", f.target, err))
		f.log.Warn("record watch broke; reconnecting", "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

func (f *Follower) follow(ctx context.Context) (received bool, err error) {
	stream, err := f.client.WatchRecords(ctx, &nodeconfigv1.WatchRecordsRequest{})
	if err != nil {
		return false, err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return received, err
		}
		received = true
		f.set(resp.GetRecords(), nil)
	}
}

func (f *Follower) set(recs *nodeconfigv1.Records, err error) {
	f.mu.Lock()
	wasErr := f.err != nil
	f.records, f.err = recs, err
	f.mu.Unlock()
	// Repeated failures are one change, not many.
	if err == nil || !wasErr {
		f.changed()
	}
}
