package main

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/checkpointd/internal/drain"
	"nodeconfig.io/services/checkpointd/internal/lifecycle"
	"nodeconfig.io/services/checkpointd/internal/servingcert"
	"nodeconfig.io/services/checkpointd/server"
	"nodeconfig.io/services/servekit"
)

// Run builds checkpointd from its flags and serves it until SIGTERM or
// SIGINT (servekit.Service).
func (o *options) Run(p *servekit.Process) error {
	var restCfg *rest.Config
	healthGates := o.consumer.restart != "none" && o.consumer.healthGates && o.servingCert.node != ""
	// Drains need to know the Node: a change that needs one is an early
	// error on a node without --node-name.
	drains := o.consumer.restart != "none" && o.servingCert.node != ""
	if p.NeedsCluster() || o.servingCert.enabled() || healthGates || drains {
		// Reviews of its callers and its own certificate: the store never
		// talks to the API server. A deadline: a slow API server must not
		// hold calls open. Each guard gets a client-side limit of its own
		// (UseCluster); these only pass Config's check.
		kube := o.kube
		kube.QPS, kube.Burst = 10, 20
		var err error
		if restCfg, err = kube.Config("nodeconfig-checkpointd"); err != nil {
			return fmt.Errorf("for --auth=token, --serving-cert-dir, --health-gates or drains (--node-name): %w", err)
		}
		restCfg.Timeout = 10 * time.Second
	}
	if p.NeedsCluster() {
		if err := p.UseCluster(restCfg); err != nil {
			return err
		}
	}
	if o.servingCert.enabled() {
		if err := o.servingCert.useFile(); err != nil {
			return err
		}
	}
	srv, err := p.NewServer()
	if err != nil {
		return err
	}
	var certs *servingcert.Manager
	if o.servingCert.enabled() {
		// Requested at once, issued while the store recovers.
		if certs, err = o.servingCert.start(restCfg, srv.Registry, p.Log); err != nil {
			return err
		}
		defer certs.Stop()
	}
	gate, err := o.consumer.gate(p.Log)
	if err != nil {
		return err
	}
	locate, err := o.locateKubelet()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if gate != nil && healthGates {
		if gate.Health, err = o.consumer.startHealth(ctx, restCfg, o.servingCert.node, p.Log); err != nil {
			return err
		}
	} else if gate != nil {
		p.Log.Info("the health gates are off (--health-gates=false, or no --node-name): a config is judged by the kubelet's healthz alone")
	}
	var drainer lifecycle.Drainer
	if gate != nil && drains {
		kube, err := kubernetes.NewForConfig(restCfg)
		if err != nil {
			return err
		}
		drainer = drain.Node{Kube: kube, Name: o.servingCert.node, Log: p.Log, Policy: o.drainAdmissionPolicy}
	}
	o.installGuard(p.Log, gate != nil)
	ckd, err := server.Open(server.Options{
		StateDir: o.stateDir, TargetDir: o.targetDir, TargetFile: o.targetFile, KubeletConfig: o.kubeletConfig, NoSync: o.noFsync, Rules: o.rules,
		MaxWatchers: o.maxWatchers, Registerer: srv.Registry, Log: p.Log, Consumer: gate, GuardDir: o.guardDir(gate != nil),
		GuardRuntimeEndpoint: o.guardRuntimeEndpoint(), GuardHostTargetDir: o.guardHostTargetDir, LocateKubelet: locate, Drainer: drainer,
	})
	if err != nil {
		return err
	}
	defer ckd.Close()
	ckd.Register(srv.GRPC)

	go ckd.RunGC(ctx, o.gcInterval, o.gcMinAge)
	go ckd.RunConsumer(ctx)
	go ckd.RunNodeFilesWatch(ctx, o.nodeFilesPeriod)
	go ckd.RunDrains(ctx)
	// The node's config is kept (recovered above, the consumer gated)
	// whatever the wait; only the ports wait for the node's own
	// certificate, so the agent never serves with another's, and is not
	// ready (its probe port is TLS too) until it has it.
	if certs != nil && !awaitCertificate(certs) {
		return nil
	}
	return srv.Serve(ctx, nodeconfigv1.CheckpointService_ServiceDesc.ServiceName)
}
