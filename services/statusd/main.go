// Command statusd projects a node's config records and other components'
// reports onto its Node object. See the repository README.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/servekit"
	"nodeconfig.io/services/statusd/server"
)

func main() { servekit.Main(run) }

func run() error {
	fs := flag.NewFlagSet("statusd", flag.ContinueOnError)
	var sf servekit.Flags
	sf.Register(fs, "127.0.0.1:7602", "127.0.0.1:9602")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file; empty means in-cluster config")
	nodeName := fs.String("node-name", os.Getenv("NODE_NAME"), "the Node this statusd patches (default $NODE_NAME)")
	checkpointd := fs.String("checkpointd", "127.0.0.1:7601", "checkpointd gRPC target (host:port or unix:///path)")
	stateFile := fs.String("state-file", "/var/lib/nodeconfig/statusd-reports.json", "where reported setter outputs are kept across restarts")
	syncPeriod := fs.Duration("sync-period", 10*time.Second, "mean period of the full status sync (jittered by 4%)")
	qps := fs.Float64("kube-api-qps", 20, "most API requests per second (client-side limit; client-go's default of 5 delays status bursts)")
	burst := fs.Int("kube-api-burst", 40, "API requests allowed in a burst above --kube-api-qps")
	if err := servekit.Parse(fs, "statusd", "Patches the node's NodeConfigReady condition and nodeconfig.io/config-status annotation."); err != nil {
		return err
	}
	if *nodeName == "" {
		return fmt.Errorf("--node-name is required (or set NODE_NAME)")
	}
	log, err := sf.Logger("statusd")
	if err != nil {
		return err
	}
	restCfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("kubernetes client config: %w", err)
	}
	restCfg.UserAgent = "nodeconfig-statusd/" + *nodeName
	restCfg.QPS, restCfg.Burst = float32(*qps), *burst
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(*checkpointd, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("--checkpointd %s: %w", *checkpointd, err)
	}
	defer conn.Close()

	sf.TokenReviews = client.AuthenticationV1().TokenReviews()
	sf.SigningKeys = servekit.SigningKeys(client.AuthenticationV1().RESTClient())
	sf.MetricsClients = servekit.MetricsClients{Authentication: client.AuthenticationV1(), Authorization: client.AuthorizationV1()}
	srv, err := servekit.New(sf, log)
	if err != nil {
		return err
	}
	sd, err := server.New(server.Options{
		Client: client, NodeName: *nodeName,
		Checkpointd: nodeconfigv1.NewCheckpointServiceClient(conn), Target: *checkpointd,
		StateFile: *stateFile, SyncPeriod: *syncPeriod, Registerer: srv.Registry, Log: log,
	})
	if err != nil {
		return err
	}
	sd.Register(srv.GRPC)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		if err := sd.Run(ctx); err != nil {
			log.Error("node status sync stopped", "err", err)
			cancel()
		}
	}()
	err = srv.Serve(ctx, nodeconfigv1.StatusService_ServiceDesc.ServiceName)
	cancel()
	return err
}
