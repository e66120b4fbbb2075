// Package store is checkpointd's durable state: ConfigMap payloads keyed by
// uid/resourceVersion and the assigned / active / lastKnownGood / error
// records, in one bbolt file. Every change is one fsynced transaction, so a
// crash at any instant leaves either the old or the new state.
package store

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"sync"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/servekit/atomicfile"
)

// SchemaVersion is the layout this code reads and writes. A store with a
// higher version was written by a newer checkpointd and is never touched.
//
//	1: payloads as the JSON of Payload, in bucketPayloadsV1.
//	2: each payload in a bucket of its own in bucketPayloads, its data
//	   compressed (see codec.go). Open converts a schema-1 store in one
//	   transaction.
const SchemaVersion = 2

var (
	bucketMeta       = []byte("meta")
	bucketPayloads   = []byte("payloads.v2")
	bucketPayloadsV1 = []byte("payloads")
	bucketRecords    = []byte("records")
	keySchema        = []byte("schema_version")
	keyRecords       = []byte("current")
)

// Errors callers can test with errors.Is.
var (
	ErrNotFound       = errors.New("checkpoint not found")
	ErrConflict       = errors.New("a different payload is already stored under this uid/resourceVersion")
	ErrReferenced     = errors.New("checkpoint is referenced by a record")
	ErrNewerSchema    = errors.New("store was written by a newer checkpointd")
	ErrCorrupt        = errors.New("store file is corrupt")
	ErrChecksumFailed = errors.New("payload does not match its sha256")
)

// Payload is one stored ConfigMap version. Its JSON is how schema 1
// stored it.
type Payload struct {
	Namespace       string            `json:"namespace"`
	Name            string            `json:"name"`
	UID             string            `json:"uid"`
	ResourceVersion string            `json:"resourceVersion"`
	Data            map[string]string `json:"data"`
	SHA256          string            `json:"sha256"`
	SizeBytes       int64             `json:"sizeBytes"`
	StoredAt        time.Time         `json:"storedAt"`
}

// Store is the open bbolt file plus the watchers of its records.
type Store struct {
	db      *bolt.DB
	path    string
	now     func() time.Time
	watchMu sync.Mutex
	watches map[*Watch]struct{}
	// puts groups concurrent PutPayload calls into shared commits.
	puts putGroup
	// published is the newest revision handed to watchers.
	published uint64
	closed    bool
}

// Options tune Open.
type Options struct {
	// NoSync skips every fsync, also the one bbolt makes when the file
	// grows (with the truncate that sets its size first: the file then
	// grows by its writes); only for tests and benchmarks that do not
	// measure durability.
	NoSync bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Open opens (or creates) the store at path. It refuses, with the file left
// as it is, a store from a newer schema or one that bbolt cannot read: a
// silently re-created store would lose last-known-good.
func Open(path string, opts Options) (s *Store, err error) {
	if fi, statErr := os.Stat(path); statErr == nil && fi.Size() == 0 {
		// bbolt would initialise an empty file as a new store.
		return nil, fmt.Errorf("%w: %s is empty (truncated?); it was left in place for inspection, see docs/recovery.md", ErrCorrupt, path)
	}
	// A truncated file makes bbolt touch mmapped pages past its end, a
	// SIGBUS; on this goroutine that becomes a panic we can turn into a
	// refusal. Open reads every page here (walk) before anything else can.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		// bbolt panics on some corrupt pages; turn that into a refusal.
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("%w: %s: %v; it was left in place for inspection, see docs/recovery.md", ErrCorrupt, path, r)
		}
	}()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second, NoSync: opts.NoSync, NoGrowSync: opts.NoSync})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("open store %s: another process holds its lock", path)
		}
		if errno := syscall.Errno(0); errors.As(err, &errno) {
			// The system refused (no file descriptors, read-only or full
			// disk, permissions): nothing says the file is damaged.
			return nil, fmt.Errorf("open store %s: %w", path, err)
		}
		return nil, fmt.Errorf("%w: open %s: %v; it was left in place for inspection, see docs/recovery.md", ErrCorrupt, path, err)
	}
	if !opts.NoSync {
		// bbolt fsyncs the file, never its directory: the name of a file
		// it just created would not survive a power cut, and with it every
		// record. Synced at each open, a start that died before this sync
		// is covered by the next.
		if err := atomicfile.SyncDir(filepath.Dir(path)); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("open store %s: %w", path, err)
		}
	}
	s = &Store{db: db, path: path, now: opts.Now, watches: map[*Watch]struct{}{}}
	if s.now == nil {
		s.now = time.Now
	}
	if err := s.walk(); err != nil {
		_ = db.Close()
		return nil, err
	}
	if err := s.checkSchema(); err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

// walk reads every key and value on the calling goroutine, so that a page
// past the end of a truncated file faults where Open can recover, not in
// bbolt's own Check goroutine.
func (s *Store) walk() error {
	var sum byte
	err := s.db.View(func(tx *bolt.Tx) error {
		var visit func(b *bolt.Bucket) error
		visit = func(b *bolt.Bucket) error {
			return b.ForEach(func(k, v []byte) error {
				if v == nil {
					if child := b.Bucket(k); child != nil {
						return visit(child)
					}
					return nil
				}
				for _, c := range v {
					sum ^= c
				}
				return nil
			})
		}
		return tx.ForEach(func(_ []byte, b *bolt.Bucket) error { return visit(b) })
	})
	_ = sum
	return err
}

func (s *Store) checkSchema() error {
	var found uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketMeta); b != nil {
			if v := b.Get(keySchema); v != nil {
				n, err := strconv.ParseUint(string(v), 10, 64)
				if err != nil {
					return fmt.Errorf("%w: %s: schema version %q is not a number", ErrCorrupt, s.path, v)
				}
				found = n
			}
		}
		// Drain the whole channel: Check's goroutine must finish before the tx ends.
		var first error
		for err := range tx.Check() {
			if first == nil {
				first = err
			}
		}
		if first != nil {
			return fmt.Errorf("%w: %s: %v; it was left in place for inspection, see docs/recovery.md", ErrCorrupt, s.path, first)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if found > SchemaVersion {
		return fmt.Errorf("%w: %s has schema version %d, this checkpointd understands up to %d; the file was not modified. "+
			"Run a checkpointd that understands schema %d (roll the agent DaemonSet forward to the image that wrote it), "+
			"or move the file aside to start with an empty store (the node falls back to its local default config until the reconciler assigns its config again); see docs/recovery.md",
			ErrNewerSchema, s.path, found, SchemaVersion, found)
	}
	if found == SchemaVersion {
		return nil
	}
	// A new store (0) or an older one: create what is missing and convert
	// every payload, all in one transaction, so that a crash leaves the old
	// store as it was.
	return s.db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketMeta, bucketPayloads, bucketRecords} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		if err := convertSchema1Payloads(tx); err != nil {
			return fmt.Errorf("convert %s from schema %d to %d: %w; the file was not modified, see docs/recovery.md", s.path, found, SchemaVersion, err)
		}
		return tx.Bucket(bucketMeta).Put(keySchema, []byte(strconv.Itoa(SchemaVersion)))
	})
}

// convertSchema1Payloads moves every schema-1 payload (JSON, in
// bucketPayloadsV1) to the schema-2 layout, keeping its digest, size and
// storage time as they are: a payload that was damaged still fails its
// digest check afterwards.
func convertSchema1Payloads(tx *bolt.Tx) error {
	old := tx.Bucket(bucketPayloadsV1)
	if old == nil {
		return nil
	}
	payloads := tx.Bucket(bucketPayloads)
	err := old.ForEach(func(k, v []byte) error {
		if v == nil {
			return fmt.Errorf("%w: schema-1 payload %s is a bucket", ErrCorrupt, k)
		}
		p, err := decodePayloadV1(v)
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		e, err := encodePayload(&p, false)
		if err != nil {
			return err
		}
		c := e.cloned()
		e.release()
		return writePayload(payloads, k, c)
	})
	if err != nil {
		return err
	}
	return tx.DeleteBucket(bucketPayloadsV1)
}

// Path is the store file's path.
func (s *Store) Path() string { return s.path }

// Close closes the store and ends every watch.
func (s *Store) Close() error {
	s.watchMu.Lock()
	s.closed = true
	for w := range s.watches {
		close(w.done)
		delete(s.watches, w)
	}
	s.watchMu.Unlock()
	return s.db.Close()
}

// PayloadKey is the bbolt key of a payload.
func PayloadKey(uid, resourceVersion string) []byte {
	return []byte(uid + "/" + resourceVersion)
}

// Digest is the sha256 over the sorted keys and values, each length-prefixed
// so that no two different maps share a digest input.
func Digest(data map[string]string) (sum string, size int64) {
	raw, size := appendData(nil, data)
	h := sha256.Sum256(raw)
	return hex.EncodeToString(h[:]), size
}

// PutPayload stores p unless the same content is already there.
// Concurrent callers share commits (see putGroup); a lone caller commits at
// once.
func (s *Store) PutPayload(p Payload) (stored Payload, created bool, err error) {
	s.puts.inflight.Add(1)
	defer s.puts.inflight.Add(-1)
	// Digest, encode and compress before the transaction, on the caller's
	// goroutine: in there, writers would take turns on one core while the
	// commit waits.
	p.StoredAt = s.now().UTC()
	enc, err := encodePayload(&p, true)
	if err != nil {
		return Payload{}, false, err
	}
	// bbolt copies the value into its pages when it commits.
	defer enc.release()
	c := &putCall{key: PayloadKey(p.UID, p.ResourceVersion), p: p, enc: enc}
	s.puts.put(c, s.commitPuts)
	return c.stored, c.created, c.err
}

// GetPayload loads a payload and checks its digest.
func (s *Store) GetPayload(uid, resourceVersion string) (Payload, error) {
	var p Payload
	var sum string
	err := s.db.View(func(tx *bolt.Tx) error {
		b, err := payloadBucket(tx.Bucket(bucketPayloads), PayloadKey(uid, resourceVersion))
		if err != nil {
			return err
		}
		if b == nil {
			return fmt.Errorf("%w: %s/%s", ErrNotFound, uid, resourceVersion)
		}
		p, sum, err = readPayload(b)
		return err
	})
	if err != nil {
		return Payload{}, err
	}
	if sum != p.SHA256 {
		return Payload{}, fmt.Errorf("%w: %s/%s", ErrChecksumFailed, uid, resourceVersion)
	}
	return p, nil
}

// HasPayload reports whether a payload is stored, without decoding it.
func (s *Store) HasPayload(uid, resourceVersion string) (bool, error) {
	var ok bool
	err := s.db.View(func(tx *bolt.Tx) error {
		b, err := payloadBucket(tx.Bucket(bucketPayloads), PayloadKey(uid, resourceVersion))
		ok = b != nil
		return err
	})
	return ok, err
}

// ListPayloads returns every payload without its data, ordered by key.
func (s *Store) ListPayloads() ([]Payload, error) {
	var out []Payload
	err := s.db.View(func(tx *bolt.Tx) error {
		payloads := tx.Bucket(bucketPayloads)
		return payloads.ForEachBucket(func(k []byte) error {
			p, err := readHeader(payloads.Bucket(k))
			if err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
			out = append(out, p)
			return nil
		})
	})
	return out, err
}

// DeletePayload removes a payload that no record references.
func (s *Store) DeletePayload(uid, resourceVersion string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		recs, err := readRecords(tx)
		if err != nil {
			return err
		}
		if references(recs, uid, resourceVersion) {
			return fmt.Errorf("%w: %s/%s is assigned, active or last-known-good", ErrReferenced, uid, resourceVersion)
		}
		payloads := tx.Bucket(bucketPayloads)
		key := PayloadKey(uid, resourceVersion)
		if b, err := payloadBucket(payloads, key); err != nil || b == nil {
			if err == nil {
				err = fmt.Errorf("%w: %s/%s", ErrNotFound, uid, resourceVersion)
			}
			return err
		}
		return payloads.DeleteBucket(key)
	})
}

// SweepUnreferenced removes payloads that no record references and that are
// older than minAge; the age keeps a payload that was just put for an
// assignment that has not been recorded yet. It returns how many it removed.
func (s *Store) SweepUnreferenced(minAge time.Duration) (int, error) {
	removed := 0
	cutoff := s.now().Add(-minAge)
	err := s.db.Update(func(tx *bolt.Tx) error {
		removed = 0
		recs, err := readRecords(tx)
		if err != nil {
			return err
		}
		payloads := tx.Bucket(bucketPayloads)
		var doomed [][]byte
		err = payloads.ForEachBucket(func(k []byte) error {
			p, err := readHeader(payloads.Bucket(k))
			if err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
			if !references(recs, p.UID, p.ResourceVersion) && p.StoredAt.Before(cutoff) {
				doomed = append(doomed, append([]byte(nil), k...))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range doomed {
			if err := payloads.DeleteBucket(k); err != nil {
				return err
			}
		}
		removed = len(doomed)
		return nil
	})
	return removed, err
}

// Records returns the current records; never nil.
func (s *Store) Records() (*nodeconfigv1.Records, error) {
	var recs *nodeconfigv1.Records
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		recs, err = readRecords(tx)
		return err
	})
	return recs, err
}

// Now is the store's clock: the time its records are written at.
func (s *Store) Now() time.Time { return s.now() }

// UpdateRecords applies change to the records in one durable transaction.
// change receives a copy and the transaction's time, which it uses as the
// write time of every record it sets. If change reports no change, nothing
// is written and the revision stays the same.
func (s *Store) UpdateRecords(change func(recs *nodeconfigv1.Records, now *timestamppb.Timestamp) (changed bool, err error)) (*nodeconfigv1.Records, error) {
	return s.UpdateRecordsWith(func(recs *nodeconfigv1.Records, now *timestamppb.Timestamp, _ Payloads) (bool, error) {
		return change(recs, now)
	})
}

// Payloads reads payloads inside a records transaction.
type Payloads struct{ b *bolt.Bucket }

// Has reports whether a payload is stored (found) and has key.
func (p Payloads) Has(uid, resourceVersion, key string) (found, hasKey bool, err error) {
	b, err := payloadBucket(p.b, PayloadKey(uid, resourceVersion))
	if err != nil {
		return true, false, err
	}
	if b == nil {
		return false, false, nil
	}
	payload, _, err := readPayload(b)
	if err != nil {
		return true, false, err
	}
	_, hasKey = payload.Data[key]
	return true, hasKey, nil
}

// UpdateRecordsWith is UpdateRecords whose change may also read payloads in
// the same transaction: a payload it finds cannot be deleted or swept
// before the records that name it are committed.
func (s *Store) UpdateRecordsWith(change func(recs *nodeconfigv1.Records, now *timestamppb.Timestamp, payloads Payloads) (changed bool, err error)) (*nodeconfigv1.Records, error) {
	var out *nodeconfigv1.Records
	var changed bool
	err := s.db.Update(func(tx *bolt.Tx) error {
		recs, err := readRecords(tx)
		if err != nil {
			return err
		}
		changed, err = change(recs, timestamppb.New(s.now().UTC()), Payloads{tx.Bucket(bucketPayloads)})
		if err != nil || !changed {
			out = recs
			return err
		}
		recs.Revision++
		buf, err := proto.Marshal(recs)
		if err != nil {
			return err
		}
		out = recs
		return tx.Bucket(bucketRecords).Put(keyRecords, buf)
	})
	if err != nil {
		return nil, err
	}
	if changed {
		s.publish(out)
	}
	return out, nil
}

func readRecords(tx *bolt.Tx) (*nodeconfigv1.Records, error) {
	recs := &nodeconfigv1.Records{}
	if v := tx.Bucket(bucketRecords).Get(keyRecords); v != nil {
		if err := proto.Unmarshal(v, recs); err != nil {
			return nil, fmt.Errorf("%w: records: %v", ErrCorrupt, err)
		}
	}
	return recs, nil
}

func references(recs *nodeconfigv1.Records, uid, resourceVersion string) bool {
	for _, src := range []*nodeconfigv1.ConfigSource{
		recs.GetAssigned().GetSource(), recs.GetActive().GetSource(), recs.GetLastKnownGood().GetSource(),
	} {
		if src != nil && src.GetUid() == uid && src.GetResourceVersion() == resourceVersion {
			return true
		}
	}
	return false
}
