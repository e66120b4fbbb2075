// Package intern keeps one copy of strings that thousands of cached
// objects repeat: the few configs every node's records name, the label
// keys and values most Nodes share.
//
// Go's unique package does not serve here: it drops its canonical copy
// once no Handle to it is held, and the cached objects hold strings, not
// Handles, so every string interned before a garbage collection would be
// copied anew after it.
package intern

import "k8s.io/utils/lru"

// Strings hands out the copy of a string it keeps. It remembers the most
// recently asked strings (an LRU): a string it forgot is kept anew, which
// costs one more copy, never a wrong value.
type Strings struct {
	kept *lru.Cache
}

// New keeps at most size strings.
func New(size int) *Strings {
	return &Strings{kept: lru.New(size)}
}

// Get returns the kept copy of s, keeping s if there is none. Safe for
// concurrent use.
func (i *Strings) Get(s string) string {
	if s == "" {
		return ""
	}
	if v, ok := i.kept.Get(s); ok {
		return v.(string)
	}
	i.kept.Add(s, s)
	return s
}
