package disruption

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	"sigs.k8s.io/yaml"

	"nodeconfig.io/services/configcheck/kubeletcheck"
)

// Plan is what one change of the kubelet's configuration needs.
type Plan struct {
	// Fields are the fields that change, sorted.
	Fields []string
	// Remove are the state files to remove while no kubelet runs, sorted.
	Remove []string
	// Drain are the changed fields that need a drain first.
	Drain []string
	// Refused are the changed fields whose change is refused.
	Refused []Refusal
}

// Refusal is a field whose change is refused, and why.
type Refusal struct{ Field, Why string }

// Restart says whether the change needs a restart at all: a change of no
// field needs none.
func (p Plan) Restart() bool { return len(p.Fields) > 0 }

// RefusedError is the error of a plan that refuses its change.
func (p Plan) RefusedError() error {
	if len(p.Refused) == 0 {
		return nil
	}
	parts := make([]string, len(p.Refused))
	for i, r := range p.Refused {
		parts[i] = fmt.Sprintf("%s (%s)", r.Field, r.Why)
	}
	return fmt.Errorf("the agent refuses to change %s on a running node", strings.Join(parts, "; "))
}

// For is the plan of the change from before to after, both effective
// configurations as the kubelet starts with them.
func For(before, after *kubeletcheck.Effective) (Plan, error) {
	fields, err := Changed(before, after)
	if err != nil {
		return Plan{}, err
	}
	return ForFields(fields, before.Config, after.Config), nil
}

// ForFields is the plan of a change of fields, with the configurations
// before and after for the rules that depend on them.
func ForFields(fields []string, before, after *kubeletconfig.KubeletConfiguration) Plan {
	p := Plan{Fields: slices.Sorted(slices.Values(fields))}
	for _, r := range Rules {
		var hit []string
		for _, f := range p.Fields {
			if within(f, r.Field) {
				hit = append(hit, f)
			}
		}
		if len(hit) == 0 || (r.When != nil && !r.When(before, after)) {
			continue
		}
		for _, f := range r.Remove {
			if !slices.Contains(p.Remove, f) {
				p.Remove = append(p.Remove, f)
			}
		}
		if r.Drain {
			p.Drain = append(p.Drain, hit...)
		}
		if r.Refuse {
			for _, f := range hit {
				p.Refused = append(p.Refused, Refusal{Field: f, Why: r.Why})
			}
		}
	}
	sort.Strings(p.Remove)
	p.Drain = slices.Compact(slices.Sorted(slices.Values(p.Drain)))
	return p
}

// within says whether field is path or lies beneath it, by whole names.
func within(field, path string) bool {
	return field == path || strings.HasPrefix(field, path+".")
}

// Changed names the fields whose values differ between two effective
// configurations, as KubeletConfiguration (v1beta1) names them: a mapping
// is compared key by key, any other value (a list included) whole.
func Changed(before, after *kubeletcheck.Effective) ([]string, error) {
	a, err := document(before)
	if err != nil {
		return nil, err
	}
	b, err := document(after)
	if err != nil {
		return nil, err
	}
	var out []string
	diff(nil, a, b, &out)
	sort.Strings(out)
	return out, nil
}

// document is an effective configuration as the v1beta1 file the kubelet
// would read it from, decoded as JSON.
func document(e *kubeletcheck.Effective) (map[string]any, error) {
	y, err := e.YAML()
	if err != nil {
		return nil, err
	}
	j, err := yaml.YAMLToJSON(y)
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := json.Unmarshal(j, &doc); err != nil {
		return nil, err
	}
	return doc, nil
}

func diff(at []string, a, b map[string]any, out *[]string) {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	for k := range keys {
		path := append(slices.Clip(at), k)
		va, vb := a[k], b[k]
		ma, aok := va.(map[string]any)
		mb, bok := vb.(map[string]any)
		switch {
		case aok && bok:
			diff(path, ma, mb, out)
		case (aok || va == nil) && (bok || vb == nil):
			// A mapping that appears or goes: each key of it changes.
			diff(path, ma, mb, out)
		case !reflect.DeepEqual(va, vb):
			*out = append(*out, strings.Join(path, "."))
		}
	}
}
