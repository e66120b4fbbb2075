package controller

import (
	"fmt"
	"time"

	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/reconciler/internal/pacing"
)

// hold is why a NodeConfig starts no new trial now (and no kubelet restart
// that one would bring); the zero hold lets trials start.
type hold struct {
	reason  string
	message string
	// next is when the next maintenance window opens (outside one).
	next time.Time
}

// trialsHeld decides whether nc may start a trial (or a departure) now:
// not while paused, not outside its maintenance windows, not while a
// window does not parse. Nodes already soaking finish and promote.
func (c *Controller) trialsHeld(nc *v1alpha1.NodeConfig) hold {
	windows, err := parseWindows(nc)
	switch {
	case err != nil:
		return hold{reason: v1alpha1.ReasonInvalidWindow, message: fmt.Sprintf("spec.rollout.windows: %v; no trial starts until it is fixed", err)}
	case nc.Spec.Rollout.Paused:
		return hold{reason: v1alpha1.ReasonPaused, message: "spec.rollout.paused: no new trial starts; nodes soaking finish and promote"}
	}
	now := c.o.Now()
	if open, next := windows.Open(now); !open {
		return hold{reason: v1alpha1.ReasonOutsideWindow, next: next,
			message: fmt.Sprintf("outside every maintenance window: no trial and no kubelet restart until the next one opens at %s", next.Format(time.RFC3339))}
	}
	return hold{}
}

func parseWindows(nc *v1alpha1.NodeConfig) (pacing.Windows, error) {
	var ws pacing.Windows
	for i, w := range nc.Spec.Rollout.Windows {
		pw, err := pacing.ParseWindow(w.Days, w.Start, w.End, w.TimeZone)
		if err != nil {
			return nil, fmt.Errorf("window %d: %w", i, err)
		}
		ws = append(ws, pw)
	}
	return ws, nil
}
