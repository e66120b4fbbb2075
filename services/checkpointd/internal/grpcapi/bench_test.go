package grpcapi

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"sigs.k8s.io/yaml"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/checkpointd/internal/lifecycle"
	"nodeconfig.io/services/checkpointd/internal/materialize"
	"nodeconfig.io/services/checkpointd/internal/store"
)

// Benchmarks call the gRPC service (request checks and the node's
// lifecycle) with fsync on, on the same disk, next to a raw bbolt Update of
// the same size: the physical floor. `make bench` runs them.

// payload64KiB is what every benchmark here stores: 64 KiB of kubelet-like
// YAML, not 64 KiB of one letter, which any compressor shrinks to nothing.
var payload64KiB = realisticPayload(64 << 10)

// kubeletWords are the words kubelet configuration keys and values are made of.
var kubeletWords = strings.Fields(`node pod image eviction memory cpu manager policy period reconcile max
min threshold percent grace shutdown cgroup driver runtime endpoint container log size files workers
monitor interval sync frequency status report update lease duration seconds address port healthz
streaming connection idle timeout authentication webhook cache ttl anonymous enabled registry pull
qps burst event record kube api content type volume stats plugin dir topology scope reserved system
allocatable enforce swap feature gate tls cipher rotate certificate server bootstrap provider cluster
dns domain static path hairpin mode iptables masquerade drop oom score pids limit resolv serialize
parallel local storage capacity isolation throttling factor debug handler profiling priority taint
effect label signal hard soft available inodes nodefs imagefs reclaim numa options alpha beta watch
strategy detection secret config map attach detach controller housekeeping util quota throttle fail
tracing sampling rate collector otlp verbosity format flush buffer json text request response client
key file bind token audience preloaded verification network plugin cni bridge mtu interface ipv4
ipv6 family dual stack zone region instance gpu nvidia`)

// realisticPayload returns size bytes of valid YAML (unique keys, nested
// maps, lists) that compresses about like a real KubeletConfiguration:
// keys from kubelet words, now and then a name no other line shares, and
// numbers, durations, quantities, paths, addresses and digests as values.
// It is deterministic. Measured: S2, what the store uses, shrinks 64 KiB of
// it 1.55×, zstd (fastest) 2.14× and flate (level 1) 2.09×;
// kubeletConfigYAML 1.56×, 2.09× and 2.19×
// (TestBenchPayloadIsLikeAKubeletConfig keeps them alike).
func realisticPayload(size int) string {
	r := rand.New(rand.NewPCG(21, 64))
	word := func() string { return kubeletWords[r.IntN(len(kubeletWords))] }
	token := func() string {
		b := make([]byte, 4+r.IntN(6))
		for i := range b {
			b[i] = 'a' + byte(r.IntN(26))
		}
		return string(b)
	}
	seen := map[string]bool{}
	key := func() string {
		for {
			var k string
			if r.IntN(4) == 0 {
				k = fmt.Sprintf("%s.example.com/%s-%s", word(), word(), token())
			} else {
				var b strings.Builder
				for i := range 2 + r.IntN(4) {
					w := word()
					if r.IntN(5) == 0 {
						w = token()
					}
					if i > 0 {
						w = strings.ToUpper(w[:1]) + w[1:]
					}
					b.WriteString(w)
				}
				k = b.String()
			}
			if !seen[k] {
				seen[k] = true
				return k
			}
		}
	}
	value := func() string {
		switch r.IntN(11) {
		case 0:
			return fmt.Sprint(r.IntN(1000000000))
		case 1:
			return fmt.Sprintf("%dm%ds", r.IntN(60), r.IntN(60))
		case 2:
			return fmt.Sprintf("%dMi", 64*(1+r.IntN(64)))
		case 3:
			return []string{"true", "false"}[r.IntN(2)]
		case 4:
			return fmt.Sprintf("/var/lib/%s/%s", word(), token())
		case 5:
			return fmt.Sprintf("%s-%s-%06x", word(), token(), r.Uint32()&0xffffff)
		case 6:
			return fmt.Sprintf("%d%%", r.IntN(100))
		case 7:
			return fmt.Sprintf("%q", fmt.Sprintf("%s.%s/%s", word(), word(), token()))
		case 8:
			return fmt.Sprintf("aws:///eu-west-1%c/i-%017x", 'a'+r.IntN(3), r.Uint64()>>4)
		case 9:
			return fmt.Sprintf("registry.k8s.io/%s@sha256:%016x", word(), r.Uint64())
		default:
			return fmt.Sprintf("10.%d.%d.%d", r.IntN(256), r.IntN(256), r.IntN(256))
		}
	}
	var b strings.Builder
	b.WriteString("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n")
	depth := 0
	for {
		ind := strings.Repeat("  ", depth)
		var line string
		switch r.IntN(8) {
		case 0: // a nested map
			line = ind + key() + ":\n"
		case 1: // a list
			line = ind + key() + ":\n"
			for range 1 + r.IntN(4) {
				line += ind + "- " + value() + "\n"
			}
		default:
			line = ind + key() + ": " + value() + "\n"
		}
		if b.Len()+len(line) > size-2 {
			break
		}
		b.WriteString(line)
		switch {
		case strings.HasSuffix(line, ":\n") && depth < 3:
			depth++
		case strings.HasSuffix(line, ":\n"): // too deep: an empty map
		case depth > 0 && r.IntN(3) == 0:
			depth--
		}
	}
	// A comment fills the rest, so that the payload is exactly size bytes.
	var pad strings.Builder
	pad.WriteString("#")
	for pad.Len() < size-b.Len()-1 {
		pad.WriteString(" " + token())
	}
	b.WriteString(pad.String()[:size-b.Len()-1] + "\n")
	return b.String()
}

func durableFixture(b *testing.B) (*Service, *store.Store) {
	b.Helper()
	dir := b.TempDir()
	st, err := store.Open(filepath.Join(dir, "c.db"), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return New(lifecycle.New(lifecycle.Options{Store: st, Target: materialize.Target{Dir: filepath.Join(dir, "target"), Name: "config.yaml"}})), st
}

func rawBolt(b *testing.B) *bolt.DB {
	b.Helper()
	db, err := bolt.Open(filepath.Join(b.TempDir(), "raw.db"), 0o600, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("b")); return err }); err != nil {
		b.Fatal(err)
	}
	return db
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkPutCheckpoint64KiB alternates a PutCheckpoint of 64 KiB and a
// raw bbolt Update of 64 KiB, and reports both and their ratio. The store
// writes the payload compressed (stored-bytes/put); the floor stays a
// commit of the 64 KiB as they are.
func BenchmarkPutCheckpoint64KiB(b *testing.B) {
	node, _ := durableFixture(b)
	db := rawBolt(b)
	var put, raw []time.Duration
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		_, err := node.PutCheckpoint(context.Background(), &nodeconfigv1.PutCheckpointRequest{
			Source: &nodeconfigv1.ConfigSource{Namespace: "ns", Name: "cm", Uid: "u", ResourceVersion: fmt.Sprint(i), Key: "k"},
			Data:   map[string]string{"k": payload64KiB},
		})
		if err != nil {
			b.Fatal(err)
		}
		put = append(put, time.Since(start))
		start = time.Now()
		// The floor writes the 64 KiB as they are, however the store
		// encodes them: it is the cost of one durable 64 KiB commit on
		// this disk.
		if err := db.Update(func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("b")).Put([]byte(fmt.Sprint(i)), []byte(payload64KiB))
		}); err != nil {
			b.Fatal(err)
		}
		raw = append(raw, time.Since(start))
	}
	b.ReportMetric(ms(percentile(put, 0.5)), "put-p50-ms")
	b.ReportMetric(ms(percentile(put, 0.99)), "put-p99-ms")
	b.ReportMetric(ms(percentile(raw, 0.5)), "bolt-p50-ms")
	b.ReportMetric(ms(percentile(put, 0.5))/ms(percentile(raw, 0.5)), "ratio-to-floor")
	_, stored := storedRatio(b, payload64KiB)
	b.ReportMetric(float64(stored), "stored-bytes/put")
}

// BenchmarkPutCheckpointConcurrent compares 32 concurrent writers with one:
// bbolt's Batch shares fsyncs between them.
func BenchmarkPutCheckpointConcurrent(b *testing.B) {
	// run returns how long writers × perWriter puts took.
	run := func(writers, perWriter int) time.Duration {
		node, _ := durableFixture(b)
		var seq atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range perWriter {
					v := seq.Add(1)
					_, err := node.PutCheckpoint(context.Background(), &nodeconfigv1.PutCheckpointRequest{
						Source: &nodeconfigv1.ConfigSource{Namespace: "ns", Name: "cm", Uid: "u", ResourceVersion: fmt.Sprint(v), Key: "k"},
						Data:   map[string]string{"k": payload64KiB},
					})
					if err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return time.Since(start)
	}
	// Alternate the two and sum over all iterations: this disk's speed
	// drifts, and both should see the same drift.
	var oneTime, manyTime time.Duration
	for range b.N {
		oneTime += run(1, 64)
		manyTime += run(32, 8)
	}
	one := float64(64*b.N) / oneTime.Seconds()
	many := float64(256*b.N) / manyTime.Seconds()
	b.ReportMetric(one, "puts/s-1-writer")
	b.ReportMetric(many, "puts/s-32-writers")
	b.ReportMetric(many/one, "speedup")
	_, stored := storedRatio(b, payload64KiB)
	b.ReportMetric(float64(stored), "stored-bytes/put")
}

// BenchmarkActivate measures SetAssigned + Activate of a 64 KiB config:
// validation, the atomic file write with fsyncs, and the record commit.
func BenchmarkActivate(b *testing.B) {
	node, _ := durableFixture(b)
	var lat []time.Duration
	for i := range b.N {
		src := &nodeconfigv1.ConfigSource{Namespace: "ns", Name: "cm", Uid: "u", ResourceVersion: fmt.Sprint(i), Key: "k"}
		b.StopTimer()
		if _, err := node.PutCheckpoint(context.Background(), &nodeconfigv1.PutCheckpointRequest{Source: src, Data: map[string]string{"k": payload64KiB}}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		if _, err := node.SetAssigned(context.Background(), &nodeconfigv1.SetAssignedRequest{Source: src, Validator: nodeconfigv1.Validator_VALIDATOR_YAML}); err != nil {
			b.Fatal(err)
		}
		resp, err := node.Activate(context.Background(), &nodeconfigv1.ActivateRequest{})
		if err != nil || resp.GetOutcome() != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ACTIVATED {
			b.Fatal(resp.GetOutcome(), err)
		}
		lat = append(lat, time.Since(start))
	}
	b.ReportMetric(ms(percentile(lat, 0.5)), "p50-ms")
	b.ReportMetric(ms(percentile(lat, 0.99)), "p99-ms")
}

// kubeletConfigYAML is a real node's kubelet configuration: the kubelet's
// defaults (as its own defaulting writes them) plus the settings nodes
// usually carry (cluster DNS, reservations, eviction thresholds, TLS,
// feature gates, taints). The benchmarks' payload must compress like it.
const kubeletConfigYAML = `address: 0.0.0.0
apiVersion: kubelet.config.k8s.io/v1beta1
authentication:
  anonymous:
    enabled: false
  webhook:
    cacheTTL: 2m0s
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
  webhook:
    cacheAuthorizedTTL: 5m0s
    cacheUnauthorizedTTL: 30s
cgroupDriver: systemd
cgroupsPerQOS: true
configMapAndSecretChangeDetectionStrategy: Watch
containerLogMaxFiles: 5
containerLogMaxSize: 10Mi
containerLogMaxWorkers: 1
containerLogMonitorInterval: 10s
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
contentType: application/vnd.kubernetes.protobuf
cpuCFSQuota: true
cpuCFSQuotaPeriod: 100ms
cpuManagerPolicy: none
cpuManagerReconcilePeriod: 10s
crashLoopBackOff:
  maxContainerRestartPeriod: 5m0s
enableControllerAttachDetach: true
enableDebugFlagsHandler: true
enableDebuggingHandlers: true
enableProfilingHandler: true
enableServer: true
enableSystemLogHandler: true
enforceNodeAllocatable:
- pods
eventBurst: 100
eventRecordQPS: 50
evictionPressureTransitionPeriod: 5m0s
failCgroupV1: true
failSwapOn: true
fileCheckFrequency: 20s
hairpinMode: promiscuous-bridge
healthzBindAddress: 127.0.0.1
healthzPort: 10248
httpCheckFrequency: 20s
imageGCHighThresholdPercent: 85
imageGCLowThresholdPercent: 80
imageMaximumGCAge: 0s
imageMinimumGCAge: 2m0s
imagePullCredentialsVerificationPolicy: NeverVerifyPreloadedImages
iptablesDropBit: 15
iptablesMasqueradeBit: 14
kind: KubeletConfiguration
kubeAPIBurst: 100
kubeAPIQPS: 50
localStorageCapacityIsolation: true
logging:
  flushFrequency: 5s
  format: text
  options:
    json:
      infoBufferSize: "0"
    text:
      infoBufferSize: "0"
  verbosity: 0
makeIPTablesUtilChains: true
maxOpenFiles: 1000000
maxPods: 110
memoryManagerPolicy: None
memoryReservationPolicy: None
memorySwap: {}
memoryThrottlingFactor: 0.9
mergeDefaultEvictionSettings: false
nodeLeaseDurationSeconds: 40
nodeStatusMaxImages: 50
nodeStatusReportFrequency: 5m0s
nodeStatusUpdateFrequency: 10s
oomScoreAdj: -999
podLogsDir: /var/log/pods
podPidsLimit: -1
port: 10250
registerNode: true
registryBurst: 10
registryPullQPS: 5
resolvConf: /etc/resolv.conf
runtimeRequestTimeout: 2m0s
seccompDefault: false
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
streamingConnectionIdleTimeout: 4h0m0s
syncFrequency: 1m0s
topologyManagerPolicy: none
topologyManagerScope: container
volumePluginDir: /usr/libexec/kubernetes/kubelet-plugins/volume/exec/
volumeStatsAggPeriod: 1m0s
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
staticPodPath: /etc/kubernetes/manifests
rotateCertificates: true
serverTLSBootstrap: true
providerID: aws:///eu-west-1b/i-0a3f9c2e71d4b5e68
tlsMinVersion: VersionTLS12
tlsCipherSuites:
- TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
- TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
- TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
- TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384
- TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
- TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
evictionHard:
  imagefs.available: 15%
  memory.available: 200Mi
  nodefs.available: 10%
  nodefs.inodesFree: 5%
  pid.available: 10%
evictionSoft:
  memory.available: 500Mi
  nodefs.available: 15%
evictionSoftGracePeriod:
  memory.available: 1m30s
  nodefs.available: 2m0s
evictionMaxPodGracePeriod: 60
evictionMinimumReclaim:
  memory.available: 100Mi
  nodefs.available: 500Mi
kubeReserved:
  cpu: 250m
  ephemeral-storage: 1Gi
  memory: 1843Mi
  pid: "1000"
systemReserved:
  cpu: 100m
  ephemeral-storage: 1Gi
  memory: 512Mi
kubeReservedCgroup: /kube.slice
systemReservedCgroup: /system.slice
reservedSystemCPUs: 0-1
featureGates:
  InPlacePodVerticalScaling: true
  KubeletTracing: false
  NodeSwap: true
  RotateKubeletServerCertificate: true
allowedUnsafeSysctls:
- net.core.somaxconn
- net.ipv4.tcp_keepalive_time
registerWithTaints:
- effect: NoSchedule
  key: node.kubernetes.io/gpu
  value: nvidia-a100
shutdownGracePeriodByPodPriority:
- priority: 2000000000
  shutdownGracePeriodSeconds: 20
- priority: 100000
  shutdownGracePeriodSeconds: 60
- priority: 0
  shutdownGracePeriodSeconds: 30
serializeImagePulls: false
maxParallelImagePulls: 5
imageServiceEndpoint: unix:///run/containerd/containerd.sock
kubeletCgroups: /system.slice/kubelet.service
topologyManagerPolicyOptions:
  prefer-closest-numa-nodes: "true"
cpuManagerPolicyOptions:
  full-pcpus-only: "true"
`

// storedRatio is how many times smaller the store keeps data (without the
// payload's header, the same ~0.2 KiB for any data), and the whole stored
// value's size.
func storedRatio(t testing.TB, data string) (ratio float64, stored int) {
	t.Helper()
	size := func(data string) int {
		n, err := store.StoredSize(store.Payload{Namespace: "ns", Name: "cm", UID: "u", ResourceVersion: "1", Data: map[string]string{"k": data}})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	stored = size(data)
	return float64(len(data)) / float64(stored-size("")), stored
}

// The benchmarks' payload is what a node's config is: valid YAML that the
// YAML validator accepts (no duplicate keys), exactly 64 KiB, that the
// store compresses about as much as a real kubelet configuration.
func TestBenchPayloadIsLikeAKubeletConfig(t *testing.T) {
	if len(payload64KiB) != 64<<10 {
		t.Fatalf("payload is %d bytes, want %d", len(payload64KiB), 64<<10)
	}
	for name, data := range map[string]string{"payload": payload64KiB, "kubelet config": kubeletConfigYAML} {
		if _, err := yaml.YAMLToJSONStrict([]byte(data)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	bench, _ := storedRatio(t, payload64KiB)
	real, _ := storedRatio(t, kubeletConfigYAML)
	t.Logf("stored ratio: payload %.2f×, kubelet config %.2f×", bench, real)
	if bench > real*1.1 || bench < real*0.9 {
		t.Fatalf("the payload compresses %.2f×, a kubelet config %.2f×: not alike", bench, real)
	}
}
