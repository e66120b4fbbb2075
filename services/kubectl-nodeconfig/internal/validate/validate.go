// Package validate checks NodeConfigs and their payloads offline, with the
// checks the reconciler runs on a new version before it assigns it to any
// node: the field policy (fieldpolicy.Rules), then the NodeConfig's
// validator (configcheck.Checker, the kubelet's through
// nodeconfig-kubelet-check as in the reconciler). It reads files of YAML
// or JSON documents: NodeConfigs, the ConfigMaps they name, and bare
// payloads (a KubeletConfiguration drop-in).
package validate

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/api/v1alpha1"
	"nodeconfig.io/services/configcheck"
	"nodeconfig.io/services/configcheck/fieldpolicy"
)

// Verdicts.
const (
	Passed = "Passed"
	// Refused: the reconciler would assign it to no node (ConfigRefused).
	Refused = "Refused"
	// Unjudged: no verdict: a validator could not run, or the payload is
	// not in the files given.
	Unjudged = "Unjudged"
)

// File is one input: its name (as given, "-" for stdin) and content.
type File struct {
	Name string
	Data []byte
}

// Options are what the checks use.
type Options struct {
	Rules   fieldpolicy.Rules
	Checker configcheck.Checker
	// Validator judges payloads no NodeConfig in the files names: bare
	// drop-ins and ConfigMaps (spec.validator's names; "" is YAML).
	Validator string
}

// Check is the verdict on one NodeConfig or payload.
type Check struct {
	// Object says what was checked: "NodeConfig demo", "ConfigMap ns/name
	// key k", "KubeletConfiguration".
	Object string `json:"object"`
	// File and Document say where it is (documents count from 1).
	File     string `json:"file"`
	Document int    `json:"document"`
	// Payload names the payload checked for a NodeConfig: "ConfigMap
	// ns/name key k"; empty for the local default.
	Payload   string `json:"payload,omitempty"`
	Validator string `json:"validator,omitempty"`
	Verdict   string `json:"verdict"`
	// Reason is the validator's or the policy's words, when not Passed.
	Reason string `json:"reason,omitempty"`
	// Node is the node's verdict (validate --node); absent when the node
	// was not asked: no --node, or refused before any node gets it.
	Node *NodeCheck `json:"node,omitempty"`

	// What the node is asked about, when judged centrally; not printed
	// (the printers' converter reads unexported fields too).
	judged    bool                   `json:"-"`
	payload   []byte                 `json:"-"`
	validator nodeconfigv1.Validator `json:"-"`
	selector  labels.Selector        `json:"-"` // a NodeConfig's
}

// Report is every check, in the files' order.
type Report struct {
	// Node is the node each payload was also judged on (--node).
	Node   string  `json:"node,omitempty"`
	Checks []Check `json:"checks"`
	// Counts by verdict: with a node, a check's worst of its own and the
	// node's.
	Passed   int `json:"passed"`
	Refused  int `json:"refused"`
	Unjudged int `json:"unjudged"`
}

// doc is one decoded document.
type doc struct {
	file  string
	index int
	kind  string
	raw   []byte
}

type configMapKey struct{ namespace, name string }

// Run checks every NodeConfig and payload in files. An error is a file that
// does not read as documents, or a document this does not check: no
// verdict on anything.
func Run(ctx context.Context, files []File, o Options) (Report, error) {
	var docs []doc
	for _, f := range files {
		d, err := documents(f)
		if err != nil {
			return Report{}, err
		}
		docs = append(docs, d...)
	}
	if len(docs) == 0 {
		return Report{}, errors.New("no documents to check")
	}
	configMaps := map[configMapKey]*corev1.ConfigMap{}
	decoded := make([]*corev1.ConfigMap, len(docs)) // the ConfigMap of docs[i]
	named := map[configMapKey]bool{}
	for i, d := range docs {
		switch d.kind {
		case "ConfigMap":
			cm := &corev1.ConfigMap{}
			if err := yaml.Unmarshal(d.raw, cm); err != nil {
				return Report{}, fmt.Errorf("%s: ConfigMap does not decode: %w", d.where(), err)
			}
			configMaps[configMapKey{cm.Namespace, cm.Name}], decoded[i] = cm, cm
		case "NodeConfig":
			var nc v1alpha1.NodeConfig
			if err := yaml.Unmarshal(d.raw, &nc); err == nil && nc.Spec.Source != nil && nc.Spec.Source.ConfigMap != nil {
				named[configMapKey{nc.Spec.Source.ConfigMap.Namespace, nc.Spec.Source.ConfigMap.Name}] = true
			}
		}
	}
	var r Report
	for i, d := range docs {
		switch d.kind {
		case "NodeConfig":
			r.add(o.nodeConfig(ctx, d, configMaps))
		case "ConfigMap":
			cm := decoded[i]
			if named[configMapKey{cm.Namespace, cm.Name}] {
				continue // judged as its NodeConfig's payload
			}
			for _, k := range slices.Sorted(maps.Keys(cm.Data)) {
				c := Check{Object: fmt.Sprintf("ConfigMap %s/%s key %s", cm.Namespace, cm.Name, k), File: d.file, Document: d.index}
				r.add(o.payload(ctx, c, o.Validator, []byte(cm.Data[k])))
			}
		case "KubeletConfiguration":
			c := Check{Object: "KubeletConfiguration", File: d.file, Document: d.index}
			r.add(o.payload(ctx, c, o.Validator, d.raw))
		}
	}
	return r, nil
}

func (r *Report) add(c Check) {
	r.Checks = append(r.Checks, c)
	r.count(c)
}

func (r *Report) count(c Check) {
	verdict := c.Verdict
	if c.Node != nil {
		verdict = worst(verdict, c.Node.Verdict)
	}
	switch verdict {
	case Passed:
		r.Passed++
	case Refused:
		r.Refused++
	default:
		r.Unjudged++
	}
}

// checked are the kinds Run judges.
var checked = []string{"NodeConfig", "ConfigMap", "KubeletConfiguration"}

// documents splits a file into its YAML or JSON documents, Lists
// flattened, empty documents dropped.
func documents(f File) ([]doc, error) {
	var out []doc
	rd := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(f.Data)))
	for i := 1; ; i++ {
		raw, err := rd.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", f.Name, i, err)
		}
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(raw, &tm); err != nil {
			return nil, fmt.Errorf("%s: document %d does not read as YAML or JSON: %w", f.Name, i, err)
		}
		if tm.Kind == "" && isEmpty(raw) {
			continue
		}
		d := doc{file: f.Name, index: i, kind: tm.Kind, raw: raw}
		if tm.Kind != "List" && !slices.Contains(checked, tm.Kind) {
			return nil, fmt.Errorf("%s: a %s, which validate does not check; want a NodeConfig, a ConfigMap or a KubeletConfiguration", d.where(), kindText(tm.Kind))
		}
		if tm.Kind == "List" {
			var list struct {
				Items []map[string]any `json:"items"`
			}
			if err := yaml.Unmarshal(raw, &list); err != nil {
				return nil, fmt.Errorf("%s: List does not decode: %w", d.where(), err)
			}
			for _, item := range list.Items {
				b, err := yaml.Marshal(item)
				if err != nil {
					return nil, err
				}
				items, err := documents(File{Name: f.Name, Data: b})
				if err != nil {
					return nil, err
				}
				for _, it := range items {
					it.index = i
					out = append(out, it)
				}
			}
			continue
		}
		out = append(out, d)
	}
}

func isEmpty(raw []byte) bool {
	var v any
	return yaml.Unmarshal(raw, &v) == nil && v == nil
}

func kindText(kind string) string {
	if kind == "" {
		return "document without a kind"
	}
	return kind
}

func (d doc) where() string { return fmt.Sprintf("%s (document %d)", d.file, d.index) }

// nodeConfig checks a NodeConfig as the reconciler does before it assigns
// a version: its selector and validator, then its payload.
func (o Options) nodeConfig(ctx context.Context, d doc, configMaps map[configMapKey]*corev1.ConfigMap) Check {
	c := Check{Object: "NodeConfig", File: d.file, Document: d.index}
	var nc v1alpha1.NodeConfig
	// Strict, as the API server's field validation: a misspelt field is
	// one the reconciler never sees.
	if err := yaml.UnmarshalStrict(d.raw, &nc); err != nil {
		c.Verdict, c.Reason = Refused, fmt.Sprintf("does not decode as a NodeConfig: %v", err)
		return c
	}
	c.Object = "NodeConfig " + nc.Name
	c.Validator = nc.Spec.Validator
	if c.Validator == "" {
		c.Validator = "yaml"
	}
	selector, err := metav1.LabelSelectorAsSelector(nc.Spec.NodeSelector)
	if err != nil {
		c.Verdict, c.Reason = Refused, fmt.Sprintf("%s: spec.nodeSelector does not parse: %v", v1alpha1.ReasonInvalidSelector, err)
		return c
	}
	validator, ok := configcheck.Validators[nc.Spec.Validator]
	if !ok {
		c.Verdict, c.Reason = Refused, fmt.Sprintf("spec.validator %q: want one of kubelet, yaml, json, none", nc.Spec.Validator)
		return c
	}
	c.selector = selector
	src := nc.Spec.Source
	if src == nil || src.ConfigMap == nil {
		// The local default: the node is asked about its drop-in removed.
		c.Verdict, c.judged, c.validator = Passed, true, validator
		return c
	}
	cm := src.ConfigMap
	c.Payload = fmt.Sprintf("ConfigMap %s/%s key %s", cm.Namespace, cm.Name, cm.Key)
	if src.Revision != nil {
		c.Verdict, c.Reason = Unjudged, fmt.Sprintf("spec.source.revision pins revision %d of its history, which is in the cluster, not in the files given", *src.Revision)
		return c
	}
	found := configMaps[configMapKey{cm.Namespace, cm.Name}]
	if found == nil {
		c.Verdict, c.Reason = Unjudged, fmt.Sprintf("ConfigMap %s/%s is not in the files given: give it with another -f", cm.Namespace, cm.Name)
		return c
	}
	payload, ok := found.Data[cm.Key]
	if !ok {
		c.Verdict, c.Reason = Refused, fmt.Sprintf("ConfigMap %s/%s has no key %s", cm.Namespace, cm.Name, cm.Key)
		return c
	}
	return o.judge(ctx, c, validator, []byte(payload))
}

// payload checks a payload no NodeConfig names, with the default validator.
func (o Options) payload(ctx context.Context, c Check, name string, data []byte) Check {
	c.Validator = name
	if c.Validator == "" {
		c.Validator = "yaml"
	}
	v, ok := configcheck.Validators[name]
	if !ok {
		c.Verdict, c.Reason = Unjudged, fmt.Sprintf("--validator %q: want one of kubelet, yaml, json, none", name)
		return c
	}
	return o.judge(ctx, c, v, data)
}

// judge is the reconciler's central check (its refusal): the field policy,
// then the validator.
func (o Options) judge(ctx context.Context, c Check, v nodeconfigv1.Validator, payload []byte) Check {
	c.payload, c.validator = payload, v
	if err := o.Rules.Admit(v, payload); err != nil {
		c.Verdict, c.Reason = Refused, err.Error()
		return c
	}
	c.judged = true
	err := o.Checker.Payload(ctx, v, payload)
	switch {
	case err == nil:
		c.Verdict = Passed
	case configcheck.Unavailable(err):
		c.Verdict, c.Reason = Unjudged, err.Error()
	default:
		c.Verdict, c.Reason = Refused, err.Error()
	}
	return c
}

// Text prints one line per check, then the counts.
func Text(w io.Writer, r Report) error {
	for _, c := range r.Checks {
		line := fmt.Sprintf("%s (%s, document %d)", c.Object, c.File, c.Document)
		if c.Payload != "" {
			line += ": payload " + c.Payload
		}
		if c.Validator != "" {
			line += ", validator " + c.Validator
		}
		line += ": " + strings.ToLower(c.Verdict)
		if c.Reason != "" {
			line += ": " + c.Reason
		}
		if c.Node != nil {
			line += "\n" + c.Node.text()
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "%d passed, %d refused, %d unjudged\n", r.Passed, r.Refused, r.Unjudged)
	return err
}
