package authn

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// How often the cluster's signing keys are read again, and how soon after a
// token signed by a key not yet seen (a key rotation) they may be read.
const (
	keysRefresh      = 10 * time.Minute
	keysUnknownRetry = 30 * time.Second
)

// KeySet is the cluster's ServiceAccount signing keys, as the API server
// publishes them for issuer discovery (/openid/v1/jwks). With them the tap
// refuses a token whose signature does not verify before it costs a
// TokenReview: a forged token that claims the reconciler's identity can no
// longer spend the reconciler's review budget. The TokenReview still
// decides; the keys only sort out what could never pass.
type KeySet struct {
	fetch func(context.Context) ([]byte, error)
	log   *slog.Logger

	mu      sync.Mutex
	keys    *jose.JSONWebKeySet
	fetched time.Time
	now     func() time.Time
	// reading is set while a read that an unknown key started is under
	// way: the tokens that meet it share it.
	reading atomic.Bool
}

// NewKeySet reads the keys with fetch (the raw JWKS document).
func NewKeySet(fetch func(context.Context) ([]byte, error), log *slog.Logger) *KeySet {
	return &KeySet{fetch: fetch, log: log, now: time.Now}
}

// Run refreshes the keys until ctx ends.
func (k *KeySet) Run(ctx context.Context) {
	for {
		k.refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(keysRefresh):
		}
	}
}

func (k *KeySet) refresh(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	raw, err := k.fetch(rctx)
	var set jose.JSONWebKeySet
	if err == nil {
		err = json.Unmarshal(raw, &set)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.fetched = k.now()
	if err != nil {
		// Without keys every token goes to review, as before they were known.
		k.log.Warn("cannot read the cluster's ServiceAccount signing keys; new tokens are only reviewed", "err", err)
		return
	}
	k.keys = &set
}

// verify says why token's signature cannot be the cluster's ("" when it
// verifies, or when no keys are known). A key id not among the keys is
// refused too, and the keys are read again (at most every
// keysUnknownRetry): after a rotation the caller's retry passes, while a
// forger's made-up key ids cost at most that one read.
func (k *KeySet) verify(parsed *jwt.JSONWebToken) string {
	if k == nil {
		return ""
	}
	k.mu.Lock()
	keys, fetched := k.keys, k.fetched
	k.mu.Unlock()
	if keys == nil {
		return ""
	}
	for _, h := range parsed.Headers {
		if h.KeyID == "" || len(keys.Key(h.KeyID)) == 0 {
			if k.now().Sub(fetched) > keysUnknownRetry && k.reading.CompareAndSwap(false, true) {
				go func() {
					defer k.reading.Store(false)
					k.refresh(context.Background())
				}()
			}
			return fmt.Sprintf("signed by key %q, which is not one of the cluster's ServiceAccount keys", h.KeyID)
		}
	}
	var c jwt.Claims
	if err := parsed.Claims(keys, &c); err != nil {
		return fmt.Sprintf("signature: %v", err)
	}
	return ""
}
