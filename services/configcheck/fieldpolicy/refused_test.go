package fieldpolicy

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

var kubeletConfigType = reflect.TypeFor[kubeletv1beta1.KubeletConfiguration]()

// jsonFields are a struct's fields by JSON name, embedded (inline) structs'
// fields promoted as encoding/json promotes them.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for n, ft := range jsonFields(f.Type) {
				fields[n] = ft
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
	}
	return fields
}

// object is the struct a field of type t decodes into field by field, or
// nil for a leaf (a scalar, list, map or a type that decodes itself, such as
// a Duration).
func object(t reflect.Type) reflect.Type {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		return nil
	}
	return t
}

// lookup finds p in the kubelet's configuration type, passing only through
// structs: the only places where encoding/json folds case, and so where
// canonicalName's matching holds.
func lookup(t *testing.T, p path) reflect.Type {
	t.Helper()
	typ := kubeletConfigType
	for i, name := range p {
		parent := object(typ)
		if parent == nil {
			t.Fatalf("%s: %s is not an object of named fields", p, p[:i])
		}
		fields := jsonFields(parent)
		field, ok := fields[name]
		if !ok {
			t.Fatalf("%s: the kubelet's configuration has no field %q under %q", p, name, p[:i])
		}
		for other := range fields {
			if other != name && strings.EqualFold(other, name) {
				t.Fatalf("%s: %q and %q fold alike, so a case variant of either could be read as the other", p, name, other)
			}
		}
		typ = field
	}
	return typ
}

func TestRefusedIsSortedAndUnique(t *testing.T) {
	paths := make([]string, len(Refused))
	for i, f := range Refused {
		paths[i] = f.Path
	}
	if !slices.IsSorted(paths) {
		t.Errorf("Refused is not sorted by Path: %v", paths)
	}
	if len(slices.Compact(slices.Clone(paths))) != len(paths) {
		t.Errorf("Refused names a path twice: %v", paths)
	}
}

func TestRefusedFieldsAreKubeletFields(t *testing.T) {
	for _, f := range Refused {
		lookup(t, splitPath(f.Path))
		if f.Reason == "" || strings.HasSuffix(f.Reason, ".") || strings.Contains(f.Reason, ". ") {
			t.Errorf("%s: the reason should be one short sentence, without a final period, to read inside the error: %q", f.Path, f.Reason)
		}
	}
}

// Nested refused paths would make one field answer to two reasons, and an
// allowed outer path would silently allow the inner one.
func TestRefusedPathsDoNotNest(t *testing.T) {
	for i, a := range refusedPaths {
		for j, b := range refusedPaths {
			if i != j && a.within(b) {
				t.Errorf("%s lies beneath %s", a, b)
			}
		}
	}
}

// subFields lists what an operator may allow beneath a refused object: all
// of the kubelet's fields there, and nothing else, so that ParseAllowed
// neither refuses a real field nor accepts a typo.
func TestSubFieldsAreTheKubeletsFieldsBeneathRefusedObjects(t *testing.T) {
	var want []string
	var beneath func(p path, typ reflect.Type)
	beneath = func(p path, typ reflect.Type) {
		obj := object(typ)
		if obj == nil {
			return
		}
		for name, ft := range jsonFields(obj) {
			child := p.child(name)
			want = append(want, child.String())
			beneath(child, ft)
		}
	}
	for _, r := range refusedPaths {
		beneath(r, lookup(t, r))
	}
	slices.Sort(want)
	if !slices.Equal(subFields, want) {
		t.Errorf("subFields =\n  %v\nthe kubelet's fields beneath refused objects are\n  %v", subFields, want)
	}
	for _, s := range subFields {
		lookup(t, splitPath(s))
	}
}
