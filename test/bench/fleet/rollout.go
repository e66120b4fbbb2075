package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"nodeconfig.io/services/api/client/clientset"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/test/framework/proc"
)

// The fleet's kubelet config: the ConfigMap the NodeConfig names, and its key.
const (
	configMapName = "kubelet"
	configMapKey  = "config.yaml"
)

// startReconciler starts the reconciler binary, pointed at the fleet's
// agents, with its metrics and profiles served on a free address; with
// -failover it stands for election, and once it leads a second instance
// stands by.
func (r *fleetRun) startReconciler() error {
	p, addr, metricsAddr, err := r.launchReconciler("reconciler")
	if err != nil {
		return err
	}
	r.reconciler, r.reconcilerAddr, r.metricsAddr = p, addr, metricsAddr
	r.peak = watchPeak(r.ctx, p.Pid(), r.metricsAddr, r.o.profiles != "")
	if !r.o.failover {
		return nil
	}
	// The standby starts once the first leads, so that the first leads.
	if err := waitLeading(r.ctx, r.metricsAddr, time.Minute); err != nil {
		return fmt.Errorf("the first reconciler: %w", err)
	}
	if r.standby, _, r.standbyMetrics, err = r.launchReconciler("standby"); err != nil {
		return err
	}
	if !r.o.auth {
		return nil
	}
	return r.waitStandbyTokens(r.wait)
}

// launchReconciler starts one reconciler instance named name (its log
// and, with -failover, its identity in the Lease).
func (r *fleetRun) launchReconciler(name string) (p *proc.Process, addr, metricsAddr string, err error) {
	bin, err := proc.Binary("reconciler")
	if err != nil {
		return nil, "", "", err
	}
	if addr, err = proc.FreeAddr(); err != nil {
		return nil, "", "", err
	}
	if metricsAddr, err = proc.FreeAddr(); err != nil {
		return nil, "", "", err
	}
	election := []string{"--leader-elect=false"}
	if r.o.failover {
		// The Lease's timing is the installed one (the flags' defaults).
		election = []string{"--leader-elect=true", "--leader-elect-namespace", namespace, "--identity", name}
	}
	args := append(append([]string{
		"--listen", addr, "--metrics-addr", metricsAddr, "--profiling", "--kubeconfig", r.c.Kubeconfig, "--admission-policy=",
		"--workers", strconv.Itoa(r.o.workers),
	}, election...), append(reconcilerArgs(r.root, r.n, r.sec), r.o.reconcilerFlags...)...)
	if p, err = proc.Start(name, bin, args, filepath.Join(r.root, name+".log"), r.o.reconcilerEnv...); err != nil {
		return nil, "", "", err
	}
	r.onStop(func() { _ = p.Stop(10 * time.Second) })
	return p, addr, metricsAddr, nil
}

// firstRollout creates the fleet's config and its NodeConfig, nothing
// assigned before, and waits until every selected node is active on it
// and has promoted it to last-known-good.
func (r *fleetRun) firstRollout() error {
	ncs, err := clientset.NewForConfig(r.adminCfg)
	if err != nil {
		return err
	}
	stopProfile, err := r.startFirstProfiling()
	if err != nil {
		return err
	}
	pids := fleetPids(r.hosts, r.c.APIServer.Pid(), r.c.Etcd.Pid(), r.reconciler.Pid())
	cpuBefore, err := readCPU(pids)
	if err != nil {
		return err
	}
	start := time.Now()
	if r.cm, err = r.admin.CoreV1().ConfigMaps(namespace).Create(r.ctx, configMap(1), metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := createNodeConfig(r.ctx, ncs, r.o.maxInTrial, r.o.soak); err != nil {
		return err
	}
	if r.first, err = r.watch.waitActive(r.ctx, r.cm.ResourceVersion, start, r.wait); err != nil {
		return err
	}
	report("first rollout (nothing assigned before)", r.first)
	if cpuAfter, err := readCPU(pids); err == nil {
		cpu := cpuAfter.minus(cpuBefore)
		fmt.Printf("    CPU it took: %v (all active in %.2f x that)\n", cpu, r.first.all().Seconds()/cpu.floor())
	}
	if err := stopProfile(); err != nil {
		return err
	}
	if syncs, err := readSyncs(r.metricsAddr); err == nil {
		fmt.Printf("    node syncs since the reconciler started: %.0f, %s; TokenRequests %.0f prefetched, %.0f on calls' paths\n", syncs.nodes, syncs.outcomes(), syncs.tokensPrefetched, syncs.tokensOnUse)
	}
	return r.watch.waitPromoted(r.ctx, r.cm.ResourceVersion, r.wait)
}

// changeConfig makes the figure's change, a new config on a fleet running
// its last-known-good, and measures it until every selected node shows it
// active.
func (r *fleetRun) changeConfig() error {
	cpuBefore, err := readCPU(r.pids)
	if err != nil {
		return err
	}
	if r.syncsBefore, err = readSyncs(r.metricsAddr); err != nil {
		return err
	}
	etcdBefore, err := readEtcdWrites(r.c.EtcdURL)
	if err != nil {
		return err
	}
	r.changeStart = time.Now()
	next := configMap(2)
	next.ResourceVersion = r.cm.ResourceVersion
	if r.cm, err = r.admin.CoreV1().ConfigMaps(namespace).Update(r.ctx, next, metav1.UpdateOptions{}); err != nil {
		return err
	}
	if r.change, err = r.watch.waitActive(r.ctx, r.cm.ResourceVersion, r.changeStart, r.wait); err != nil {
		return err
	}
	r.promotedDuring = r.watch.promotedSoFar()
	cpuAfter, err := readCPU(r.pids)
	if err != nil {
		return err
	}
	r.cpu = cpuAfter.minus(cpuBefore)
	etcdAfter, err := readEtcdWrites(r.c.EtcdURL)
	r.etcd = etcdAfter.minus(etcdBefore)
	return err
}

func configMap(v int) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: configMapName, Namespace: namespace},
		Data:       map[string]string{configMapKey: fmt.Sprintf("maxPods: %d\nlogging:\n  verbosity: 2\n", 100+v)},
	}
}

func createNodeConfig(ctx context.Context, ncs clientset.Interface, maxInTrial string, soak time.Duration) error {
	soakSeconds := int64(soak.Seconds())
	if soakSeconds < 1 {
		// The Go type would leave a zero out, and the API server default
		// it to 600 s; the API refuses it as written.
		return fmt.Errorf("-soak %v: the NodeConfig's soakSeconds must be at least 1", soak)
	}
	_, err := ncs.NodeConfigV1alpha1().NodeConfigs().Create(ctx, &v1alpha1.NodeConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet"},
		Spec: v1alpha1.NodeConfigSpec{
			NodeSelector: &v1alpha1.LabelSelector{MatchLabels: map[string]string{label: "bench"}},
			Source:       &v1alpha1.Source{ConfigMap: &v1alpha1.ConfigMapSource{Namespace: namespace, Name: configMapName, Key: configMapKey}},
			SoakSeconds:  soakSeconds,
			// As the flag says it, a string ("100%"), as it always went.
			Rollout: v1alpha1.Rollout{MaxInTrial: ptr.To(intstr.FromString(maxInTrial))},
		},
	}, metav1.CreateOptions{})
	return err
}
