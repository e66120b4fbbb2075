package lifecycle

import (
	"errors"
	"fmt"
	"path/filepath"

	"nodeconfig.io/proto/nodeconfig/records"
	"nodeconfig.io/services/checkpointd/internal/kubeletfiles"
	"nodeconfig.io/services/checkpointd/internal/materialize"
	"nodeconfig.io/services/configcheck/kubeletcheck"
)

// followKubeletLocked finds where the kubelet reads its files now
// (Options.Locate) and moves the node's drop-in there. It runs at start
// and before each activation and drift repair, which are what write the
// file: a kubelet restarted with other flags is followed at the next of
// them, and the move, which restarts the kubelet, waits for the reconciler
// (its maintenance window) as any write does. A kubelet without
// --config-dir is refused, and one whose files cannot be found (its
// command line unreadable, a file not mounted into the agent) too, each
// recorded as an early error and returned as a *WriteFailedError; a kubelet
// not running (between two of its runs) keeps the files last found.
func (n *Node) followKubeletLocked() error {
	if n.locate == nil {
		return nil
	}
	loc, err := n.locate()
	var noDir *kubeletfiles.NoConfigDirError
	switch {
	case err == nil:
	case errors.As(err, &noDir):
		return n.earlyErrorLocked(records.ReasonKubeletNoConfigDir, noDir.Error(), err)
	case errors.Is(err, kubeletfiles.ErrNotRunning) && n.located != nil:
		return nil
	default:
		return n.earlyErrorLocked(records.ReasonNodeFilesUnreadable, fmt.Sprintf("cannot tell where the kubelet reads its files: %v", err), err)
	}
	if n.located != nil && *n.located == loc {
		return nil
	}
	if n.located != nil {
		// The file left behind is read by no kubelet; the records say
		// what is active, and the next write puts it where the kubelet
		// reads now.
		n.log.Warn("the kubelet reads its files elsewhere now: the node's drop-in follows it, the one at the old place is left as it is",
			"from", n.located.Host, "to", loc.Host)
	} else {
		n.log.Info("found where the kubelet reads its files", "config", loc.Host.Config, "config_dir", loc.Host.ConfigDir)
	}
	n.filesMu.Lock()
	defer n.filesMu.Unlock()
	n.target.Dir = loc.Agent.ConfigDir
	n.kubelet = &kubeletcheck.NodeFiles{BaseConfig: loc.Agent.Config, DropInDir: loc.Agent.ConfigDir, Own: n.target.Path()}
	if n.guard != nil {
		// The guard runs on the host: it names the host's path.
		n.guard.HostTarget = filepath.Join(loc.Host.ConfigDir, n.target.Name)
	}
	n.located = &loc
	return nil
}

// files are the target and the kubelet's files as they stand, for the
// readers that take no mu.
func (n *Node) files() (materialize.Target, *kubeletcheck.NodeFiles) {
	n.filesMu.RLock()
	defer n.filesMu.RUnlock()
	return n.target, n.kubelet
}
