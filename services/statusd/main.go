// Command statusd projects a node's config records and other components'
// reports onto its Node object. See the repository README.
package main

import (
	"flag"
	"os"
	"time"

	"nodeconfig.io/services/servekit"
	"nodeconfig.io/services/servekit/kubeapi"
	"nodeconfig.io/services/statusd/internal/nodesync"
)

func main() {
	servekit.Command{
		Name: "statusd", Listen: "127.0.0.1:7602", MetricsAddr: "127.0.0.1:9602",
		Usage: "Patches the node's NodeConfigReady condition and nodeconfig.io/config-status annotation.",
	}.Main(new(options))
}

// options are statusd's own flags.
type options struct {
	kube                             kubeapi.Flags
	nodeName, checkpointd, stateFile string
	admissionPolicy                  string
	syncPeriod                       time.Duration
	tellRollbacks                    bool
}

// Register implements servekit.Service.
func (o *options) Register(fs *flag.FlagSet) {
	o.kube.Register(fs, 20, 40, "client-go's default of 5 delays status bursts")
	fs.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "the Node this statusd patches (default $NODE_NAME)")
	fs.StringVar(&o.checkpointd, "checkpointd", "127.0.0.1:7601", "checkpointd gRPC target (host:port or unix:///path)")
	fs.StringVar(&o.stateFile, "state-file", "/var/lib/nodeconfig/statusd-reports.json", "where reported setter outputs are kept across restarts")
	fs.StringVar(&o.admissionPolicy, "admission-policy", "nodeconfig-status-own-node,nodeconfig-status-own-events", "the ValidatingAdmissionPolicies (each with its binding of the same name, comma-separated) that confine this agent to its own Node's condition and annotation and to Events about its own Node: statusd refuses to start unless they are installed and enforced; empty: no check (a cluster without deploy/rbac.yaml)")
	fs.BoolVar(&o.tellRollbacks, "rollback-events", true, "record a Warning Event on the Node for each rollback the node does by itself (its kubelet unhealthy, a health gate failed, the start guard fell back), which no reconciler may be running to tell")
	fs.DurationVar(&o.syncPeriod, "sync-period", nodesync.DefaultSyncPeriod, "mean period of the full status sync (jittered by 4%), a safety net: every change of its inputs syncs at once")
}
