package grpcapi

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/checkpointd/internal/lifecycle"
	"nodeconfig.io/services/checkpointd/internal/materialize"
	"nodeconfig.io/services/checkpointd/internal/store"
)

// Benchmarks call the gRPC service (request checks and the node's
// lifecycle) with fsync on, on the same disk, next to a raw bbolt Update of
// the same size: the physical floor. `make bench` runs them.

var payload64KiB = strings.Repeat("x", 64<<10)

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
		if _, err := node.PutCheckpoint(context.Background(), &nodeconfigv1.PutCheckpointRequest{Source: src, Data: map[string]string{"k": "a: \"" + payload64KiB + "\"\n"}}); err != nil {
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
