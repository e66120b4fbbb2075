// Command checkpointd is a node's durable store of config checkpoints and
// records. See the repository README for what it does and how to poke it.
package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/tools/clientcmd"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/checkpointd/server"
	"nodeconfig.io/services/servekit"
)

func main() { servekit.Main(run) }

func run() error {
	fs := flag.NewFlagSet("checkpointd", flag.ContinueOnError)
	var sf servekit.Flags
	sf.Register(fs, "127.0.0.1:7601", "127.0.0.1:9601")
	stateDir := fs.String("state-dir", "/var/lib/nodeconfig", "directory of the bbolt store (checkpoints.db)")
	targetDir := fs.String("target-dir", "/etc/kubernetes/kubelet.conf.d", "directory the active config is written to")
	targetFile := fs.String("target-file", "50-nodeconfig.conf", "file name of the active config in --target-dir")
	kubeletConfig := fs.String("kubelet-config", "", "the kubelet's --config file: a kubelet drop-in is then judged merged with it and the other drop-ins of --target-dir, as the kubelet merges them at start (empty: judged alone over the kubelet's defaults)")
	maxWatchers := fs.Int("max-watchers", 64, "most concurrent WatchRecords streams")
	gcInterval := fs.Duration("gc-interval", 10*time.Minute, "how often unreferenced checkpoints are swept")
	gcMinAge := fs.Duration("gc-min-age", time.Hour, "an unreferenced checkpoint younger than this is kept (it may be about to be assigned)")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig for TokenReview with --auth=token; empty means in-cluster config")
	noFsync := fs.Bool("unsafe-no-fsync", false, "skip fsync of the store (tests and benchmarks only: a crash can lose writes)")
	var cf consumerFlags
	cf.register(fs)
	if err := servekit.Parse(fs, "checkpointd", "Stores config checkpoints and the assigned/active/lastKnownGood/error records of one node."); err != nil {
		return err
	}
	log, err := sf.Logger("checkpointd")
	if err != nil {
		return err
	}
	if sf.Auth == "token" || sf.MetricsAuth == "token" {
		// Only reviews of its callers: the store never talks to the API server.
		restCfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
		if err != nil {
			return fmt.Errorf("kubernetes client config for --auth=token: %w", err)
		}
		restCfg.UserAgent = "nodeconfig-checkpointd"
		// Its own budget and deadline: reviews are already capped by the
		// guard, and a slow API server must not hold calls open.
		restCfg.QPS, restCfg.Burst, restCfg.Timeout = 10, 20, 10*time.Second
		client, err := authenticationv1client.NewForConfig(restCfg)
		if err != nil {
			return err
		}
		sf.TokenReviews = client.TokenReviews()
		sf.SigningKeys = servekit.SigningKeys(client.RESTClient())
		authz, err := authorizationv1client.NewForConfig(restCfg)
		if err != nil {
			return err
		}
		sf.MetricsClients = servekit.MetricsClients{Authentication: client, Authorization: authz}
	}
	srv, err := servekit.New(sf, log)
	if err != nil {
		return err
	}
	gate, err := cf.gate(log)
	if err != nil {
		return err
	}
	ckd, err := server.Open(server.Options{
		StateDir: *stateDir, TargetDir: *targetDir, TargetFile: *targetFile, KubeletConfig: *kubeletConfig, NoSync: *noFsync,
		MaxWatchers: *maxWatchers, Registerer: srv.Registry, Log: log, Consumer: gate,
	})
	if err != nil {
		return err
	}
	defer ckd.Close()
	ckd.Register(srv.GRPC)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go ckd.RunGC(ctx, *gcInterval, *gcMinAge)
	go ckd.RunConsumer(ctx)
	return srv.Serve(ctx, nodeconfigv1.CheckpointService_ServiceDesc.ServiceName)
}
