package main

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/client-go/kubernetes"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/admissionpolicy"
	"nodeconfig.io/services/servekit"
	"nodeconfig.io/services/statusd/server"
)

// Run builds statusd from its flags and serves it until SIGTERM or SIGINT,
// or until the node's sync stops (servekit.Service).
func (o *options) Run(p *servekit.Process) error {
	if o.nodeName == "" {
		return fmt.Errorf("--node-name is required (or set NODE_NAME)")
	}
	restCfg, err := o.kube.Config("nodeconfig-statusd/" + o.nodeName)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(o.checkpointd, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("--checkpointd %s: %w", o.checkpointd, err)
	}
	defer conn.Close()

	if err := p.UseCluster(restCfg); err != nil {
		return err
	}
	srv, err := p.NewServer()
	if err != nil {
		return err
	}
	sd, err := server.New(server.Options{
		Client: client, NodeName: o.nodeName,
		Checkpointd: nodeconfigv1.NewCheckpointServiceClient(conn), Target: o.checkpointd,
		StateFile: o.stateFile, SyncPeriod: o.syncPeriod, Registerer: srv.Registry, Log: p.Log, TellRollbacks: o.tellRollbacks,
	})
	if err != nil {
		return err
	}
	sd.Register(srv.GRPC)
	if err := admissionpolicy.AtStart(p.Log, client.AdmissionregistrationV1(), o.admissionPolicy); err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		if err := sd.Run(ctx); err != nil {
			p.Log.Error("node status sync stopped", "err", err)
			cancel()
		}
	}()
	err = srv.Serve(ctx, nodeconfigv1.StatusService_ServiceDesc.ServiceName)
	cancel()
	return err
}
