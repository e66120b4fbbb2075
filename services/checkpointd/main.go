// Command checkpointd is a node's durable store of config checkpoints and
// records. See the repository README for what it does and how to poke it.
package main

import (
	"flag"
	"os"
	"path/filepath"
	"time"

	"nodeconfig.io/services/servekit"
	"nodeconfig.io/services/servekit/kubeapi"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "guard" {
		guardMain(os.Args[2:])
	}
	servekit.Command{
		Name: "checkpointd", Listen: "127.0.0.1:7601", MetricsAddr: "127.0.0.1:9601",
		Usage: "Stores config checkpoints and the assigned/active/lastKnownGood/error records of one node.",
	}.Main(new(options))
}

// options are checkpointd's own flags.
type options struct {
	// The store, and the file it keeps in line with the active record.
	stateDir, targetDir, targetFile string
	kubeletConfig                   string
	kube                            kubeapi.Flags // only its kubeconfig is a flag
	maxWatchers                     int
	gcInterval, gcMinAge            time.Duration
	noFsync                         bool
	consumer                        consumerFlags
}

// Register implements servekit.Service.
func (o *options) Register(fs *flag.FlagSet) {
	fs.StringVar(&o.stateDir, "state-dir", "/var/lib/nodeconfig", "directory of the bbolt store (checkpoints.db)")
	fs.StringVar(&o.targetDir, "target-dir", "/etc/kubernetes/kubelet.conf.d", "directory the active config is written to")
	fs.StringVar(&o.targetFile, "target-file", "50-nodeconfig.conf", "file name of the active config in --target-dir")
	fs.StringVar(&o.kubeletConfig, "kubelet-config", "", "the kubelet's --config file: a kubelet drop-in is then judged merged with it and the other drop-ins of --target-dir, as the kubelet merges them at start (empty: judged alone over the kubelet's defaults)")
	fs.IntVar(&o.maxWatchers, "max-watchers", 64, "most concurrent WatchRecords streams")
	fs.DurationVar(&o.gcInterval, "gc-interval", 10*time.Minute, "how often unreferenced checkpoints are swept")
	fs.DurationVar(&o.gcMinAge, "gc-min-age", time.Hour, "an unreferenced checkpoint younger than this is kept (it may be about to be assigned)")
	fs.StringVar(&o.kube.Kubeconfig, "kubeconfig", "", "kubeconfig for TokenReview with --auth=token; empty means in-cluster config")
	fs.BoolVar(&o.noFsync, "unsafe-no-fsync", false, "skip fsync of the store and of the config file it writes (tests and benchmarks only: a crash of the machine can lose writes)")
	o.consumer.register(fs)
}

// guardDir is where the kubelet's host-side start guard finds the trial:
// beside the store, where the node gates on its consumer (the kubelet).
func (o *options) guardDir(gated bool) string {
	if !gated {
		return ""
	}
	return filepath.Join(o.stateDir, "guard")
}
