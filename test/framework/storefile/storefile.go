// Package storefile reads checkpointd's store file (checkpoints.db, bbolt,
// schema 2) from the test's own process, not through checkpointd: what is
// on the node's disk, whatever checkpointd answers. checkpointd holds the
// file's lock while it runs, so read it after checkpointd stopped.
package storefile

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/klauspost/compress/s2"
	bolt "go.etcd.io/bbolt"
)

// Payload is one stored version as its header has it, once its data was
// read and checked against the header's digest.
type Payload struct {
	UID             string    `json:"uid"`
	ResourceVersion string    `json:"resourceVersion"`
	SHA256          string    `json:"sha256"`
	StoredAt        time.Time `json:"storedAt"`
}

// Payloads reads every payload of the store file at path, by
// "uid/resourceVersion". A payload whose data does not decode to its
// digest is an error: it is not on disk as stored.
func Payloads(path string) (map[string]Payload, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	out := map[string]Payload{}
	err = db.View(func(tx *bolt.Tx) error {
		// The layout of services/checkpointd/internal/store (schema 2).
		payloads := tx.Bucket([]byte("payloads.v2"))
		if payloads == nil {
			return fmt.Errorf("%s has no payloads.v2 bucket", path)
		}
		return payloads.ForEachBucket(func(key []byte) error {
			b := payloads.Bucket(key)
			var p Payload
			if err := json.Unmarshal(b.Get([]byte("header")), &p); err != nil {
				return fmt.Errorf("payload %s: header: %w", key, err)
			}
			data, err := s2.Decode(nil, b.Get([]byte("data")))
			if err != nil {
				return fmt.Errorf("payload %s: data: %w", key, err)
			}
			if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != p.SHA256 {
				return fmt.Errorf("payload %s: data hashes to %x, its header says %s", key, sum, p.SHA256)
			}
			out[string(key)] = p
			return nil
		})
	})
	return out, err
}
