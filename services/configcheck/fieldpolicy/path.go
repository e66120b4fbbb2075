package fieldpolicy

import (
	"slices"
	"strings"
)

// A path is a field's JSON names from the top of the configuration down.
// Walks compare segments, never joined strings, so that a key with a dot in
// it cannot pass for two fields.
type path []string

func splitPath(dotted string) path { return strings.Split(dotted, ".") }

func (p path) String() string { return strings.Join(p, ".") }

// within says whether p is prefix or lies beneath it.
func (p path) within(prefix path) bool {
	return len(p) >= len(prefix) && slices.Equal(p[:len(prefix)], prefix)
}

// child is p extended by one name, without sharing p's backing array.
func (p path) child(name string) path {
	return append(slices.Clip(p), name)
}

var (
	refusedPaths = func() []path {
		ps := make([]path, len(Refused))
		for i, f := range Refused {
			ps[i] = splitPath(f.Path)
		}
		return ps
	}()
	// knownPaths are the paths the policy knows the kubelet's names of.
	knownPaths = func() []path {
		ps := slices.Clone(refusedPaths)
		for _, s := range subFields {
			ps = append(ps, splitPath(s))
		}
		return ps
	}()
)

// canonicalName is the field name the kubelet reads key as, beneath parent.
// The kubelet decodes merged drop-ins with encoding/json, which takes a key
// for a struct field when it equals the field's name or, failing that,
// equals it under Unicode case folding (strings.EqualFold's folding:
// "ReadOnlyPort", "READONLYPORT" and "ſtaticPodPath", with a long s, are
// all read as the field). A key the policy knows no field for is returned as
// it is: it can only matter beneath a refused object, which it sets like any
// other key.
func canonicalName(parent path, key string) string {
	folded := ""
	for _, known := range knownPaths {
		if len(known) <= len(parent) || !slices.Equal(known[:len(parent)], parent) {
			continue
		}
		name := known[len(parent)]
		if name == key {
			return name
		}
		if folded == "" && strings.EqualFold(name, key) {
			folded = name
		}
	}
	if folded != "" {
		return folded
	}
	return key
}
