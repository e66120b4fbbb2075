// Package chart generates the Helm chart of the install from deploy/: the
// objects kustomize renders, with the chart's parameters substituted in
// (namespace, images, resources, the kubelet's paths) and the optional
// components behind a value each. It changes nothing else, so the chart
// renders what deploy/ renders.
package chart

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// originAnnotation is where kustomize's buildMetadata says which file an
// object came from; the generator groups templates by it and drops it.
const originAnnotation = "config.kubernetes.io/origin"

// Object is one rendered object: its YAML tree and the file of deploy/ it
// came from (relative to deploy/).
type Object struct {
	Node   *yaml.Node
	Origin string
}

// Kind, Name and Namespace read the object's identity.
func (o Object) Kind() string      { return scalar(o.Node, "kind") }
func (o Object) Name() string      { return scalar(o.Node, "metadata", "name") }
func (o Object) Namespace() string { return scalar(o.Node, "metadata", "namespace") }

// Key identifies an object among the others of a render.
func (o Object) Key() string {
	return scalar(o.Node, "apiVersion") + "/" + o.Kind() + "/" + o.Namespace() + "/" + o.Name()
}

// Overlay describes a kustomization over deploy/: extra components, and
// kustomization fields (images, namespace, ...) as YAML.
type Overlay struct {
	Components []string
	Extra      string
}

// Render renders deploy with overlay, as 'kubectl kustomize' does, into
// its YAML stream.
func Render(deploy string, overlay Overlay) ([]byte, error) {
	out, _, err := build(deploy, overlay)
	return out, err
}

// Kustomize renders deploy with overlay, as 'kubectl kustomize' does, into
// its objects, in kustomize's order.
func Kustomize(deploy string, overlay Overlay) ([]Object, error) {
	// deploy/'s own order, and each object's file, by which the generator
	// groups templates.
	overlay.Extra = "sortOptions: {order: fifo}\nbuildMetadata: [originAnnotations]\n" + overlay.Extra
	out, base, err := build(deploy, overlay)
	if err != nil {
		return nil, err
	}
	objs, err := Parse(out)
	if err != nil {
		return nil, err
	}
	prefix := base + "/"
	for i := range objs {
		origin := annotation(objs[i].Node, originAnnotation)
		// A file's object names its path; a generated one (a
		// configMapGenerator's) the kustomization that generates it.
		var meta struct {
			Path         string
			ConfiguredIn string `yaml:"configuredIn"`
		}
		err := yaml.Unmarshal([]byte(origin), &meta)
		if meta.Path == "" {
			meta.Path = meta.ConfiguredIn
		}
		if err != nil || !strings.HasPrefix(meta.Path, prefix) {
			return nil, fmt.Errorf("%s: origin %q is not in %s", objs[i].Key(), origin, deploy)
		}
		objs[i].Origin = strings.TrimPrefix(meta.Path, prefix)
		dropAnnotation(objs[i].Node, originAnnotation)
	}
	return objs, nil
}

// build renders deploy with overlay from a kustomization in a temporary
// directory; it returns deploy's path from there too, which kustomize's
// origin annotations start with.
func build(deploy string, overlay Overlay) ([]byte, string, error) {
	deploy, err := filepath.Abs(deploy)
	if err != nil {
		return nil, "", err
	}
	dir, err := os.MkdirTemp("", "chartgen-overlay-")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(dir)
	rel := func(p string) string {
		r, err := filepath.Rel(dir, p)
		if err != nil {
			return p
		}
		return filepath.ToSlash(r)
	}
	var k strings.Builder
	fmt.Fprintf(&k, "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [%s]\n", rel(deploy))
	if len(overlay.Components) > 0 {
		k.WriteString("components:\n")
		for _, c := range overlay.Components {
			fmt.Fprintf(&k, "  - %s\n", rel(filepath.Join(deploy, "components", c)))
		}
	}
	k.WriteString(overlay.Extra)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k.String()), 0o644); err != nil {
		return nil, "", err
	}
	opts := krusty.MakeDefaultOptions()
	// kubectl's: kustomize's legacy order unless the kustomization says otherwise.
	opts.Reorder = krusty.ReorderOptionUnspecified
	m, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, "", err
	}
	out, err := m.AsYaml()
	return out, rel(deploy), err
}

// Parse reads a stream of YAML documents into objects.
func Parse(stream []byte) ([]Object, error) {
	dec := yaml.NewDecoder(bytes.NewReader(stream))
	var objs []Object
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); err != nil {
			if err.Error() == "EOF" {
				return objs, nil
			}
			return nil, err
		}
		if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
			continue
		}
		objs = append(objs, Object{Node: doc.Content[0]})
	}
}

// child is the value of key in mapping node n, nil if none.
func child(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// Lookup is the node at path in the mapping n, nil if none.
func Lookup(n *yaml.Node, path ...string) *yaml.Node {
	for _, k := range path {
		n = child(n, k)
	}
	return n
}

func scalar(n *yaml.Node, path ...string) string {
	if v := Lookup(n, path...); v != nil && v.Kind == yaml.ScalarNode {
		return v.Value
	}
	return ""
}

func annotation(n *yaml.Node, key string) string {
	return scalar(Lookup(n, "metadata", "annotations"), key)
}

// dropAnnotation removes key from the object's annotations, and the
// annotations themselves when nothing is left.
func dropAnnotation(n *yaml.Node, key string) {
	meta := child(n, "metadata")
	ann := child(meta, "annotations")
	if ann == nil {
		return
	}
	removeKey(ann, key)
	if len(ann.Content) == 0 {
		removeKey(meta, "annotations")
	}
}

func removeKey(n *yaml.Node, key string) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			n.Content = append(n.Content[:i], n.Content[i+2:]...)
			return
		}
	}
}

// Marshal writes objects as one YAML stream.
func Marshal(objs []Object) ([]byte, error) {
	var buf bytes.Buffer
	for i, o := range objs {
		if i > 0 {
			buf.WriteString("---\n")
		}
		b, err := Encode(o.Node)
		if err != nil {
			return nil, err
		}
		buf.Write(b)
	}
	return buf.Bytes(), nil
}

// Encode writes n as YAML indented by two, as the chart's files are.
func Encode(n *yaml.Node) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(n); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
