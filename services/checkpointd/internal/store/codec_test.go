package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
)

// testData are payloads a node may hold: text that compresses, text that
// hardly does, several keys, empty values, non-ASCII. A ConfigMap's data
// is UTF-8 (protobuf strings), which schema 1's JSON needed.
func testData() map[string]map[string]string {
	r := rand.New(rand.NewPCG(1, 2))
	var noise strings.Builder
	for noise.Len() < 1<<20-16 {
		noise.WriteRune(rune(0x21 + r.IntN(0x5e)))
		if r.IntN(16) == 0 {
			noise.WriteRune(rune(0x400 + r.IntN(0x100)))
		}
	}
	var yaml strings.Builder
	for i := 0; yaml.Len() < 64<<10; i++ {
		yaml.WriteString("key" + strconv.Itoa(i) + ": value-" + strconv.Itoa(r.IntN(1e6)) + "\n")
	}
	return map[string]map[string]string{
		"yaml":       {"config.yaml": yaml.String()},
		"keys":       {"a": "1", "b": "", "c.conf": "maxPods: 250\n", "ü/ключ": "значение ✓"},
		"empty":      {"k": ""},
		"incompress": {"blob": noise.String()},
		"nul-bytes":  {"k\x00": "\x00\x01\x02"},
	}
}

func TestPayloadsRoundTripCompressedWithDigestsOfTheOriginal(t *testing.T) {
	s := openTemp(t)
	all := testData()
	// Schema 2 keeps any bytes, not only UTF-8.
	all["binary"] = map[string]string{"k": "\xff\xfe\x80 not UTF-8"}
	for name, data := range all {
		t.Run(name, func(t *testing.T) {
			put, created, err := s.PutPayload(payload("u-"+name, "1", data))
			if err != nil || !created {
				t.Fatalf("put: created=%v err=%v", created, err)
			}
			sum, size := Digest(data)
			if put.SHA256 != sum || put.SizeBytes != size {
				t.Fatalf("put reports %s/%d, want the digest of the uncompressed data %s/%d", put.SHA256, put.SizeBytes, sum, size)
			}
			got, err := s.GetPayload("u-"+name, "1")
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got.Data, data) || got.SHA256 != sum || got.SizeBytes != size || !got.StoredAt.Equal(put.StoredAt) {
				t.Fatalf("read back differs: sha %s size %d storedAt %v", got.SHA256, got.SizeBytes, got.StoredAt)
			}
			// The same content again returns the stored payload, data included.
			again, created, err := s.PutPayload(payload("u-"+name, "1", data))
			if err != nil || created || !maps.Equal(again.Data, data) || !again.StoredAt.Equal(put.StoredAt) {
				t.Fatalf("second put: created=%v err=%v", created, err)
			}
			// Its own bucket: a header and the data compressed.
			var header, block []byte
			s.db.View(func(tx *bolt.Tx) error {
				b := tx.Bucket(bucketPayloads).Bucket(PayloadKey("u-"+name, "1"))
				header, block = bytes.Clone(b.Get(keyHeader)), bytes.Clone(b.Get(keyData))
				return nil
			})
			if !json.Valid(header) || bytes.Contains(header, []byte(`"data"`)) {
				t.Fatalf("header %s: want JSON without the data", header)
			}
			if name == "yaml" && len(block) > int(size)*2/3 {
				t.Fatalf("64 KiB of YAML stored as %d bytes: not compressed", len(block))
			}
			if name == "incompress" && len(block) > int(size)+1024 {
				t.Fatalf("incompressible data grew from %d to %d bytes", size, len(block))
			}
		})
	}
	list, err := s.ListPayloads()
	if err != nil || len(list) != len(all) {
		t.Fatalf("list: %d payloads, err %v", len(list), err)
	}
	for _, p := range list {
		if p.Data != nil || p.SHA256 == "" || p.UID == "" {
			t.Fatalf("listed payload %+v: want its header without data", p.UID)
		}
	}
}

// Digest is what clients compare: schema 2 computes it from the buffer it
// compresses, and it must stay what schema 1 computed.
func TestDigestIsUnchanged(t *testing.T) {
	// The README's walkthrough shows this digest.
	if sum, size := Digest(map[string]string{"config.yaml": "maxPods: 110\n"}); sum != "1edd3c80128f725950ca6b365b37ca3d9bcdaa40c21adb8a9d6d8d2e247bf29f" || size != 24 {
		t.Fatalf("Digest = %s, %d", sum, size)
	}
	schema1 := func(data map[string]string) string {
		keys := slices.Sorted(maps.Keys(data))
		h := sha256.New()
		for _, k := range keys {
			for _, part := range []string{k, data[k]} {
				h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(part))))
				h.Write([]byte(part))
			}
		}
		return hex.EncodeToString(h.Sum(nil))
	}
	for name, data := range testData() {
		if got, _ := Digest(data); got != schema1(data) {
			t.Errorf("%s: Digest changed", name)
		}
	}
}

// Puts share pooled buffers; concurrent ones must each store their own.
func TestConcurrentPutsKeepEachPayload(t *testing.T) {
	s := openTemp(t)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := range 4 {
				rv := strconv.Itoa(w*10 + i)
				data := map[string]string{"k": strings.Repeat(rv+" ", 1000*(1+w%5))}
				if _, _, err := s.PutPayload(payload("u", rv, data)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	for w := range 16 {
		for i := range 4 {
			rv := strconv.Itoa(w*10 + i)
			got, err := s.GetPayload("u", rv)
			if err != nil || got.Data["k"] != strings.Repeat(rv+" ", 1000*(1+w%5)) {
				t.Fatalf("%s: err %v", rv, err)
			}
		}
	}
}

func TestDamagedCompressedDataIsCorruptNotWrongData(t *testing.T) {
	s := openTemp(t)
	data := testData()["yaml"]
	if _, _, err := s.PutPayload(payload("u", "1", data)); err != nil {
		t.Fatal(err)
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketPayloads).Bucket(PayloadKey("u", "1"))
		v := bytes.Clone(b.Get(keyData))
		v[len(v)-len(v)/3] ^= 0x40
		return b.Put(keyData, v)
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetPayload("u", "1"); !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrChecksumFailed) {
		t.Fatalf("err = %v, want ErrCorrupt or ErrChecksumFailed", err)
	}
}

// schema1Payload is a payload as schema 1 stored it: the JSON of this.
type schema1Payload struct {
	Namespace       string            `json:"namespace"`
	Name            string            `json:"name"`
	UID             string            `json:"uid"`
	ResourceVersion string            `json:"resourceVersion"`
	Data            map[string]string `json:"data"`
	SHA256          string            `json:"sha256"`
	SizeBytes       int64             `json:"sizeBytes"`
	StoredAt        time.Time         `json:"storedAt"`
}

// writeSchema1Store writes a store the way a schema-1 checkpointd did:
// buckets meta, payloads and records; meta/schema_version "1", payloads as
// JSON, records as protobuf.
func writeSchema1Store(t *testing.T, path string, payloads map[string]schema1Payload, recs *nodeconfigv1.Records) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range []string{"meta", "payloads", "records"} {
			if _, err := tx.CreateBucket([]byte(name)); err != nil {
				return err
			}
		}
		if err := tx.Bucket([]byte("meta")).Put([]byte("schema_version"), []byte("1")); err != nil {
			return err
		}
		for _, p := range payloads {
			v, err := json.Marshal(p)
			if err != nil {
				return err
			}
			if err := tx.Bucket([]byte("payloads")).Put([]byte(p.UID+"/"+p.ResourceVersion), v); err != nil {
				return err
			}
		}
		buf, err := proto.Marshal(recs)
		if err != nil {
			return err
		}
		return tx.Bucket([]byte("records")).Put([]byte("current"), buf)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestOpenConvertsASchema1StoreKeepingEveryPayloadAndRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoints.db")
	stored := time.Date(2025, 3, 4, 5, 6, 7, 890123456, time.UTC)
	old := map[string]schema1Payload{}
	i := 0
	for name, data := range testData() {
		i++
		sum, size := Digest(data)
		old[name] = schema1Payload{Namespace: "ns", Name: "cm-" + name, UID: "uid-" + name, ResourceVersion: strconv.Itoa(i),
			Data: data, SHA256: sum, SizeBytes: size, StoredAt: stored.Add(time.Duration(i) * time.Second)}
	}
	ts := timestamppb.New(stored)
	recs := &nodeconfigv1.Records{
		Revision:      7,
		Assigned:      &nodeconfigv1.AssignedRecord{Source: &nodeconfigv1.ConfigSource{Namespace: "ns", Name: "cm-yaml", Uid: "uid-yaml", ResourceVersion: "1", Key: "config.yaml"}, SoakSeconds: 600, Validator: nodeconfigv1.Validator_VALIDATOR_YAML, WrittenAt: ts, NodeConfig: "nc"},
		LastKnownGood: &nodeconfigv1.SourceRecord{Source: &nodeconfigv1.ConfigSource{Namespace: "ns", Name: "cm-keys", Uid: "uid-keys", ResourceVersion: "2", Key: "c.conf"}, WrittenAt: ts},
		Error:         &nodeconfigv1.ErrorRecord{Error: &nodeconfigv1.ConfigError{Reason: "R", Message: "m"}, WrittenAt: ts},
	}
	writeSchema1Store(t, path, old, recs)

	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	check := func(s *Store) {
		t.Helper()
		var schema string
		var v1, v2 int
		s.db.View(func(tx *bolt.Tx) error {
			schema = string(tx.Bucket(bucketMeta).Get(keySchema))
			if tx.Bucket([]byte("payloads")) != nil {
				v1++
			}
			return tx.Bucket(bucketPayloads).ForEach(func(k, v []byte) error {
				if v == nil {
					v2++
				}
				return nil
			})
		})
		if schema != "2" || v1 != 0 || v2 != len(old) {
			t.Fatalf("after open: schema version %q, schema-1 bucket left %d, %d payload buckets; want 2, 0, %d", schema, v1, v2, len(old))
		}
		for name, want := range old {
			got, err := s.GetPayload(want.UID, want.ResourceVersion)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			for k, v := range want.Data {
				if got.Data[k] != v {
					t.Fatalf("%s: key %q differs after conversion", name, k)
				}
			}
			if len(got.Data) != len(want.Data) || got.Namespace != want.Namespace || got.Name != want.Name ||
				got.SHA256 != want.SHA256 || got.SizeBytes != want.SizeBytes || !got.StoredAt.Equal(want.StoredAt) {
				t.Fatalf("%s: converted payload %s/%s/%s/%d/%v, want %s/%s/%s/%d/%v", name,
					got.Namespace, got.Name, got.SHA256, got.SizeBytes, got.StoredAt,
					want.Namespace, want.Name, want.SHA256, want.SizeBytes, want.StoredAt)
			}
		}
		gotRecs, err := s.Records()
		if err != nil || !proto.Equal(gotRecs, recs) {
			t.Fatalf("records after conversion %v, want %v (err %v)", gotRecs, recs, err)
		}
	}
	check(s)
	s.Close()
	// Opening the converted store again changes nothing.
	before, _ := os.ReadFile(path)
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Error("reopening a converted store modified it")
	}
	check(s)
}

// A schema-1 payload that cannot be read stops the conversion: the store
// is refused as corrupt and stays schema 1, every other payload untouched.
func TestConversionOfADamagedSchema1StoreLeavesItAsItWas(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoints.db")
	data := map[string]string{"k": "v"}
	sum, size := Digest(data)
	writeSchema1Store(t, path, map[string]schema1Payload{
		"good": {UID: "u", ResourceVersion: "1", Data: data, SHA256: sum, SizeBytes: size},
	}, &nodeconfigv1.Records{})
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("payloads")).Put(PayloadKey("u", "2"), []byte(`{"uid":"u","data":`))
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	before, _ := os.ReadFile(path)
	_, err = Open(path, Options{})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "u/2") || !strings.Contains(err.Error(), "not modified") {
		t.Fatalf("err = %v, want ErrCorrupt naming u/2 and saying the file was kept", err)
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Fatal("a failed conversion modified the file")
	}
}

// A lone put writes its payload once, not the payloads next to it: in
// one bucket, bbolt rewrote a put's neighbours with it (about 4.7 times the
// bytes of a 64 KiB put).
func TestALonePutWritesItsPayloadOnce(t *testing.T) {
	s := openTemp(t)
	r := rand.New(rand.NewPCG(3, 4))
	data := func() map[string]string {
		b := make([]byte, 64<<10)
		for i := range b {
			b[i] = 'a' + byte(r.IntN(26))
		}
		return map[string]string{"config.yaml": string(b)}
	}
	for _, rv := range []string{"1", "3", "5", "7", "9"} {
		if _, _, err := s.PutPayload(payload("u", rv, data())); err != nil {
			t.Fatal(err)
		}
	}
	d := data()
	stored, err := StoredSize(payload("u", "4", d))
	if err != nil {
		t.Fatal(err)
	}
	pageBytes := func() int64 { st := s.db.Stats(); return st.TxStats.GetPageAlloc() }
	before := pageBytes()
	if _, _, err := s.PutPayload(payload("u", "4", d)); err != nil {
		t.Fatal(err)
	}
	written := pageBytes() - before
	// The payload's pages, plus a few: the parent's leaf, the root, the
	// freelist.
	if limit := int64(stored) + 6*4096; written > limit {
		t.Fatalf("a put of %d stored bytes wrote %d bytes of pages, want at most %d", stored, written, limit)
	}
	t.Logf("stored %d bytes, wrote %d bytes of pages", stored, written)
}

// One put that bbolt refuses fails alone: the others in its commit are
// stored.
func TestACommitStoresTheOthersWhenOnePutFails(t *testing.T) {
	s := openTemp(t)
	var calls []*putCall
	for _, key := range []string{"u/1", "", "u/2"} {
		p := payload("u", key, map[string]string{"k": key})
		e, err := encodePayload(&p, true)
		if err != nil {
			t.Fatal(err)
		}
		defer e.release()
		calls = append(calls, &putCall{key: []byte(key), p: p, enc: e})
	}
	s.commitPuts(calls)
	if calls[1].err == nil || calls[1].created {
		t.Fatalf("empty key: created=%v err=%v, want an error", calls[1].created, calls[1].err)
	}
	for _, c := range []*putCall{calls[0], calls[2]} {
		if c.err != nil || !c.created {
			t.Fatalf("%s: created=%v err=%v", c.key, c.created, c.err)
		}
		b, _ := s.HasPayload("u", string(c.key[2:]))
		if !b {
			t.Fatalf("%s was not stored", c.key)
		}
	}
}

// Concurrent puts of one key: one stores it, the same content again is not
// an error, other content is a conflict.
func TestConcurrentPutsOfOneKey(t *testing.T) {
	s := openTemp(t)
	var wg sync.WaitGroup
	var created, conflicts, same atomic.Int32
	for i := range 32 {
		wg.Go(func() {
			v := "a"
			if i%2 == 1 {
				v = "b"
			}
			_, c, err := s.PutPayload(payload("u", "1", map[string]string{"k": v}))
			switch {
			case errors.Is(err, ErrConflict):
				conflicts.Add(1)
			case err != nil:
				t.Error(err)
			case c:
				created.Add(1)
			default:
				same.Add(1)
			}
		})
	}
	wg.Wait()
	if created.Load() != 1 || conflicts.Load() != 16 || same.Load() != 15 {
		t.Fatalf("created %d, conflicts %d, same %d; want 1, 16, 15", created.Load(), conflicts.Load(), same.Load())
	}
}
