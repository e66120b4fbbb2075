package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"nodeconfig.io/proto/nodeconfig/records"
	"nodeconfig.io/services/configcheck"
	"nodeconfig.io/services/configcheck/kubeletcheck"
)

// RunNodeFilesWatch judges the active config again whenever the node's
// own kubelet files (its --config file, the other drop-ins) change, every
// period until ctx ends. The kubelet reads them only at its next start, so
// a change that makes the active drop-in invalid would stop it then. A
// change counts once the files hold still for a period: a file being
// rewritten is not judged half written. Without a kubelet (none given,
// none to find) it returns.
func (n *Node) RunNodeFilesWatch(ctx context.Context, period time.Duration) {
	if _, kubelet := n.files(); (kubelet == nil && n.locate == nil) || period <= 0 {
		return
	}
	t := time.NewTicker(period)
	defer t.Stop()
	var seen, judged string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, kubelet := n.files()
		if kubelet == nil {
			continue // not found yet
		}
		fp, err := kubelet.Fingerprint()
		if err != nil {
			if seen != "" {
				n.log.Warn("cannot read the node's kubelet files; the active config is judged again once they read", "err", err)
			}
			seen = ""
			continue
		}
		if fp != seen || fp == judged {
			seen = fp
			continue
		}
		if err := n.RejudgeActive(); err != nil {
			n.log.Warn("could not judge the active config against the node's files; tried again at their next change or the agent's start", "err", err)
		}
		judged = fp
	}
}

// RejudgeActive judges the active config merged with the node's files as
// they are now, and rolls back what no longer validates on them: to
// last-known-good, or the local default when last-known-good fails too. A
// node file it cannot read blames nothing.
func (n *Node) RejudgeActive() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.kubelet == nil {
		return nil
	}
	// Twice at most: the active config, then last-known-good it fell to.
	for range 2 {
		recs, err := n.store.Records()
		if err != nil {
			return err
		}
		active := recs.GetActive().GetSource()
		if active == nil || records.RollbackUnfinished(recs) {
			return nil
		}
		payload, err := n.content(active)
		if err != nil {
			return err // a checkpoint that no longer loads is drift repair's
		}
		judgeErr := n.judge(recs.GetAssigned().GetValidator(), payload)
		if judgeErr == nil {
			return nil
		}
		if nodeFiles := (*kubeletcheck.NodeFilesError)(nil); errors.As(judgeErr, &nodeFiles) {
			return judgeErr
		}
		message := fmt.Sprintf("active %s no longer validates merged with the node's files as they are now (its --config file or another drop-in changed): %v", describeExactly(active), judgeErr)
		if _, err := n.rollBackLocked(configcheck.ReasonValidationFailed, message, active); err != nil {
			return err
		}
		if after, err := n.store.Records(); err != nil || proto.Equal(after.GetActive().GetSource(), active) {
			return err
		}
	}
	return nil
}
