package main

import (
	"context"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/admissionpolicy"
	nodeconfigclient "nodeconfig.io/services/api/client/clientset"
	"nodeconfig.io/services/reconciler/server"
	"nodeconfig.io/services/servekit"
)

// Run builds the reconciler from its flags and serves it until SIGTERM or
// SIGINT, or until its leader election stops (servekit.Service).
func (o *options) Run(p *servekit.Process) error {
	restCfg, err := o.kube.Config("nodeconfig-reconciler")
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	so := o.server
	so.Kube, so.Log = kube, p.Log
	if so.NodeConfigClient, err = nodeconfigclient.NewForConfig(restCfg); err != nil {
		return err
	}
	if so.Metadata, err = metadata.NewForConfig(restCfg); err != nil {
		return err
	}
	if o.leaderElect {
		so.LeaderElection = &o.election
	}
	rec, err := server.New(so)
	if err != nil {
		return err
	}

	if err := p.UseCluster(restCfg); err != nil {
		return err
	}
	srv, err := p.NewServer()
	if err != nil {
		return err
	}
	rec.Register(srv.GRPC, srv.Registry)
	if err := admissionpolicy.AtStart(p.Log, kube.AdmissionregistrationV1(), o.admissionPolicy); err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		if err := rec.Run(ctx); err != nil {
			p.Log.Error("leader election", "err", err)
			cancel()
		}
	}()
	return srv.Serve(ctx, nodeconfigv1.ReconcilerService_ServiceDesc.ServiceName)
}
