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
// It is deterministic. Measured: zstd (fastest) shrinks 64 KiB of it 2.14×
// and flate (level 1) 2.09×; a 4.3 KiB KubeletConfiguration (the kubelet's
// defaults plus the usual node settings) 2.09× and 2.19×.
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
// raw bbolt Update of 64 KiB, and reports both and their ratio.
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

// The benchmarks' payload is what a node's config is: valid YAML that the
// YAML validator accepts (no duplicate keys), exactly 64 KiB.
func TestBenchPayloadIsValidYAML(t *testing.T) {
	if len(payload64KiB) != 64<<10 {
		t.Fatalf("payload is %d bytes, want %d", len(payload64KiB), 64<<10)
	}
	if _, err := yaml.YAMLToJSONStrict([]byte(payload64KiB)); err != nil {
		t.Fatal(err)
	}
}
