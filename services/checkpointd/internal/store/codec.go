package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/klauspost/compress/s2"
	bolt "go.etcd.io/bbolt"
)

// Schema 2 keeps each payload in a bucket of its own, named by its key
// (PayloadKey) inside bucketPayloads, holding two values:
//
//	header: the JSON of payloadHeader, everything but the data, which a
//	        listing, a sweep or a conflict check reads without the data;
//	data:   the data as one S2 block. Before compression it is Digest's
//	        input: each key and its value in key order, each preceded by
//	        its length, so one buffer is both hashed and compressed.
//
// SHA256 and SizeBytes stay those of the uncompressed data: clients see the
// same digests as before.
//
// A bucket per payload: bbolt keeps at least two values in a leaf and
// copies a whole leaf when one of its values changes, so payloads side by
// side in one bucket would make each put rewrite its neighbours. In a
// bucket of its own a payload is written once; what changes in the parent
// is a small bucket header.
//
// S2 (github.com/klauspost/compress/s2, a Snappy extension) because
// encoding competes with the commit for CPU when many writers put at once:
// a stronger codec saves bytes but makes concurrent puts slower
// (docs/decisions.md has the figures).
var (
	keyHeader = []byte("header")
	keyData   = []byte("data")
)

// payloadHeader is a stored payload without its data.
type payloadHeader struct {
	Namespace       string    `json:"namespace"`
	Name            string    `json:"name"`
	UID             string    `json:"uid"`
	ResourceVersion string    `json:"resourceVersion"`
	SHA256          string    `json:"sha256"`
	SizeBytes       int64     `json:"sizeBytes"`
	StoredAt        time.Time `json:"storedAt"`
}

// maxDecodedBytes bounds what decompressing one payload may allocate: far
// above the 1 MiB a ConfigMap can hold.
const maxDecodedBytes = 64 << 20

// bufs recycles the large buffers of a put and of a read (the data before
// and after compression), which would otherwise be most of what the
// collector has to deal with when many writers put at once.
var bufs = sync.Pool{New: func() any { return new([]byte) }}

// appendData appends Digest's input for data to dst.
func appendData(dst []byte, data map[string]string) (out []byte, size int64) {
	keys := make([]string, 0, len(data))
	n := 0
	for k, v := range data {
		keys = append(keys, k)
		n += 16 + len(k) + len(v)
	}
	sort.Strings(keys)
	dst = slices.Grow(dst, n)
	for _, k := range keys {
		for _, part := range [2]string{k, data[k]} {
			dst = binary.BigEndian.AppendUint64(dst, uint64(len(part)))
			dst = append(dst, part...)
			size += int64(len(part))
		}
	}
	return dst, size
}

// encoded is a payload ready to be stored; block is borrowed from bufs.
type encoded struct {
	header []byte
	block  *[]byte
}

func (e encoded) release() { bufs.Put(e.block) }

// encodePayload encodes p, first setting its SHA256 and SizeBytes to those
// of its data if setDigest (a conversion keeps the ones it found). It
// compresses, so callers run it outside write transactions and release the
// result once the transaction is over: bbolt reads the values when it
// commits.
func encodePayload(p *Payload, setDigest bool) (encoded, error) {
	rawBuf := bufs.Get().(*[]byte)
	defer bufs.Put(rawBuf)
	raw, size := appendData((*rawBuf)[:0], p.Data)
	*rawBuf = raw
	if setDigest {
		sum := sha256.Sum256(raw)
		p.SHA256, p.SizeBytes = hex.EncodeToString(sum[:]), size
	}
	header, err := json.Marshal(payloadHeader{
		Namespace: p.Namespace, Name: p.Name, UID: p.UID, ResourceVersion: p.ResourceVersion,
		SHA256: p.SHA256, SizeBytes: p.SizeBytes, StoredAt: p.StoredAt,
	})
	if err != nil {
		return encoded{}, err
	}
	e := encoded{header: header, block: bufs.Get().(*[]byte)}
	n := s2.MaxEncodedLen(len(raw))
	*e.block = s2.Encode(slices.Grow((*e.block)[:0], n)[:n], raw)
	return e, nil
}

// writePayload stores e under key in payloads, which must not hold key.
func writePayload(payloads *bolt.Bucket, key []byte, e encoded) error {
	b, err := payloads.CreateBucket(key)
	if err != nil {
		return err
	}
	if err := b.Put(keyHeader, e.header); err != nil {
		return err
	}
	return b.Put(keyData, *e.block)
}

// payloadBucket is the bucket of the payload stored under key, or nil.
func payloadBucket(payloads *bolt.Bucket, key []byte) (*bolt.Bucket, error) {
	b := payloads.Bucket(key)
	if b == nil && payloads.Get(key) != nil {
		return nil, fmt.Errorf("%w: payload %s is a value, not a bucket", ErrCorrupt, key)
	}
	return b, nil
}

// readHeader reads a stored payload without its data.
func readHeader(b *bolt.Bucket) (Payload, error) {
	v := b.Get(keyHeader)
	if v == nil {
		return Payload{}, fmt.Errorf("%w: payload has no header", ErrCorrupt)
	}
	var h payloadHeader
	if err := json.Unmarshal(v, &h); err != nil {
		return Payload{}, fmt.Errorf("%w: payload header: %v", ErrCorrupt, err)
	}
	return Payload{
		Namespace: h.Namespace, Name: h.Name, UID: h.UID, ResourceVersion: h.ResourceVersion,
		SHA256: h.SHA256, SizeBytes: h.SizeBytes, StoredAt: h.StoredAt,
	}, nil
}

// readPayload reads a stored payload, data included, and returns the digest
// of the data it read for the caller to compare with p.SHA256. The data
// does not alias the store's pages.
func readPayload(b *bolt.Bucket) (p Payload, digest string, err error) {
	if p, err = readHeader(b); err != nil {
		return Payload{}, "", err
	}
	block := b.Get(keyData)
	if block == nil {
		return Payload{}, "", fmt.Errorf("%w: payload %s/%s has no data", ErrCorrupt, p.UID, p.ResourceVersion)
	}
	if p.Data, digest, err = decodeData(block); err != nil {
		return Payload{}, "", fmt.Errorf("%w: payload %s/%s data: %v", ErrCorrupt, p.UID, p.ResourceVersion, err)
	}
	return p, digest, nil
}

// decodePayloadV1 reads a schema-1 value: the JSON of Payload.
func decodePayloadV1(v []byte) (Payload, error) {
	var p Payload
	if err := json.Unmarshal(v, &p); err != nil {
		return Payload{}, fmt.Errorf("%w: schema-1 payload: %v", ErrCorrupt, err)
	}
	return p, nil
}

var errDataFormat = errors.New("malformed key/value encoding")

func decodeData(block []byte) (data map[string]string, digest string, err error) {
	n, err := s2.DecodedLen(block)
	if err != nil {
		return nil, "", err
	}
	if n > maxDecodedBytes {
		return nil, "", fmt.Errorf("decoded length %d is past the limit", n)
	}
	buf := bufs.Get().(*[]byte)
	defer bufs.Put(buf)
	raw, err := s2.Decode(slices.Grow((*buf)[:0], n)[:n], block)
	if err != nil {
		return nil, "", err
	}
	*buf = raw
	sum := sha256.Sum256(raw)
	data = map[string]string{}
	next := func() (string, error) {
		if len(raw) < 8 {
			return "", errDataFormat
		}
		n := binary.BigEndian.Uint64(raw)
		if n > uint64(len(raw)-8) {
			return "", errDataFormat
		}
		s := string(raw[8 : 8+n])
		raw = raw[8+n:]
		return s, nil
	}
	for len(raw) > 0 {
		k, err := next()
		if err != nil {
			return nil, "", err
		}
		v, err := next()
		if err != nil {
			return nil, "", err
		}
		data[k] = v
	}
	return data, hex.EncodeToString(sum[:]), nil
}

// StoredSize is how many bytes of values PutPayload writes for p: its
// header and its compressed data.
func StoredSize(p Payload) (int, error) {
	p.StoredAt = time.Now().UTC()
	e, err := encodePayload(&p, true)
	if err != nil {
		return 0, err
	}
	defer e.release()
	return len(e.header) + len(*e.block), nil
}

// cloned is e with its compressed data copied out of the borrowed buffer,
// for a transaction that outlives e: not to be released.
func (e encoded) cloned() encoded {
	block := bytes.Clone(*e.block)
	return encoded{header: e.header, block: &block}
}
