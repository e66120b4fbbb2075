package main

import (
	"context"
	"errors"
	"fmt"
)

// onStop registers stop to undo what a phase just started: every phase
// registers its cleanup as soon as there is something to clean up, so a
// failure in any later phase, or in the rest of this one, still runs it.
func (r *fleetRun) onStop(stop func()) { r.stops = append(r.stops, stop) }

// stopAll runs the registered cleanups, the last registered first, as
// deferred calls would: the reconciler stops before the agents it calls,
// the agents before the cluster they watch, the cluster before its state
// directory goes.
func (r *fleetRun) stopAll() {
	for i := len(r.stops) - 1; i >= 0; i-- {
		r.stops[i]()
	}
	r.stops = nil
}

// withCause names the reason for a stop from outside (a signal, an agent
// host gone) rather than the "context canceled" it caused.
func withCause(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); err != nil && cause != nil && !errors.Is(err, cause) {
		return fmt.Errorf("%w (%v)", cause, err)
	}
	return err
}
