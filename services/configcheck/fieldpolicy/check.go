package fieldpolicy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"
)

// RefusedError names the refused fields a drop-in sets, in Refused's order.
type RefusedError struct {
	Fields []Field
}

func (e *RefusedError) Error() string {
	named := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		named[i] = fmt.Sprintf("%s (%s)", f.Path, f.Reason)
	}
	list := named[len(named)-1]
	if len(named) > 1 {
		list = strings.Join(named[:len(named)-1], ", ") + " and " + list
	}
	return fmt.Sprintf("the field policy refuses %s; an operator may allow a field with --%s", list, AllowFlag)
}

// Check refuses a drop-in that sets a field in Refused the policy does not
// allow, with a *RefusedError. Setting a field at all is refused, whatever
// the value (false, 0, "", null, {}): the policy guards who decides the
// field, not which value is dangerous. A drop-in that is not a YAML or JSON
// mapping is the validator's to judge: Check passes it.
func (p Policy) Check(dropIn []byte) error {
	set := map[int]bool{}
	for _, doc := range mappings(dropIn) {
		p.walk(doc, nil, set)
	}
	var refused []Field
	for i, f := range Refused {
		if set[i] {
			refused = append(refused, f)
		}
	}
	if len(refused) == 0 {
		return nil
	}
	return &RefusedError{Fields: refused}
}

// mappings reads a drop-in both as JSON and as YAML. The kubelet's decoder
// takes input that looks like JSON as JSON and the rest as YAML (through
// sigs.k8s.io/yaml, as here), and the two parsers do not accept the same
// inputs: the YAML parser refuses JSON's "\/" escape, for one. So each view
// that parses is checked, and a drop-in cannot hide a field from one parser
// behind the other. Either view is read as leniently as may be (the first
// value, numbers of any size), since what fails to parse here passes.
func mappings(dropIn []byte) []map[string]any {
	var docs []map[string]any
	if doc, ok := jsonMapping(dropIn); ok {
		docs = append(docs, doc)
	}
	if converted, err := yaml.YAMLToJSON(dropIn); err == nil {
		if doc, ok := jsonMapping(converted); ok {
			docs = append(docs, doc)
		}
	}
	return docs
}

func jsonMapping(data []byte) (map[string]any, bool) {
	decoder := json.NewDecoder(bytes.NewReader(data))
	decoder.UseNumber()
	var doc map[string]any
	if decoder.Decode(&doc) != nil || doc == nil {
		return nil, false
	}
	return doc, true
}

// walk marks in set the refused fields that doc, found at parent, sets.
// A drop-in is merged into the kubelet's configuration as a JSON merge
// patch: a mapping changes only the keys it holds, so walk descends into
// it; any other value (null deletes, a scalar or list replaces, and {} is
// taken as setting too, failing closed) sets the field and all beneath it.
func (p Policy) walk(doc map[string]any, parent path, set map[int]bool) {
	for key, value := range doc {
		field := parent.child(canonicalName(parent, key))
		if !guarded(field) {
			continue
		}
		if object, ok := value.(map[string]any); ok && len(object) > 0 {
			p.walk(object, field, set)
			continue
		}
		p.mark(field, set)
	}
}

// guarded says whether setting field can change a refused field: it is one,
// lies beneath one or holds one.
func guarded(field path) bool {
	for _, r := range refusedPaths {
		if field.within(r) || r.within(field) {
			return true
		}
	}
	return false
}

// mark records the refused fields that setting field changes, unless the
// operator allowed what it changes.
func (p Policy) mark(field path, set map[int]bool) {
	for i, r := range refusedPaths {
		switch {
		case field.within(r):
			// field, or the object above it, is refused: allowing field
			// or a path above it lets it through.
			if !p.allows(field) {
				set[i] = true
			}
		case r.within(field):
			// field holds a refused field and replaces it whole.
			if !p.allows(r) {
				set[i] = true
			}
		}
	}
}
