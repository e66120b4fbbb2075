package chart

import (
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Name is the chart's name.
const Name = "nodeconfig"

// Components are the components of deploy/components that the chart
// renders behind a value each (<value>.enabled): ones that add objects, or
// that remove fields of deploy/'s objects.
var Components = []struct{ Dir, Value string }{
	{"cert-manager", "certManager"},
	{"prometheus", "prometheus"},
	{"reconciler-on-workers", "reconcilerOnWorkers"},
}

// kubeletFlags are the agent's flags that name the kubelet's process, each
// a value of the chart (under kubelet:).
var kubeletFlags = []struct{ Flag, Value, Doc string }{
	{"--consumer-cgroup", "cgroup", "The kubelet's cgroup: systemctl show -p ControlGroup kubelet."},
	{"--consumer-exe-path", "exePath", "The kubelet's executable: the path of systemctl show -p ExecStart kubelet."},
	{"--consumer-health-url", "healthURL", "The kubelet's healthz (its healthzBindAddress and healthzPort)."},
}

// header opens every generated file.
const header = "# Generated from deploy/ by tools/release/cmd/chartgen (make chart): edit deploy/, not this file.\n"

// base is what deploy/kustomization.yaml says of the install as a whole.
type base struct {
	Namespace string
	Images    []struct {
		Name    string `yaml:"name"`
		NewName string `yaml:"newName"`
		NewTag  string `yaml:"newTag"`
	}
}

// Generate renders deploy/ and its components and returns the chart's
// files, by their path in the chart's directory.
func Generate(deploy string) (map[string][]byte, error) {
	raw, err := os.ReadFile(filepath.Join(deploy, "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	var b base
	if err := yaml.Unmarshal(raw, &b); err != nil {
		return nil, err
	}
	s := &substitutions{namespace: b.Namespace, images: map[string]string{}, resources: map[string]*yaml.Node{},
		hostPaths: map[string]string{}, flags: map[string]string{}}
	if b.Namespace == "" {
		return nil, fmt.Errorf("deploy/kustomization.yaml sets no namespace")
	}
	for _, img := range b.Images {
		registry, svc := path.Split(img.NewName)
		registry = strings.TrimSuffix(registry, "/")
		if s.registry != "" && (registry != s.registry || img.NewTag != s.tag) {
			return nil, fmt.Errorf("image %s: every image of deploy/ must share one registry and tag (%s, %s)", img.Name, s.registry, s.tag)
		}
		s.registry, s.tag = registry, img.NewTag
		s.images[img.NewName+":"+img.NewTag] = svc
		s.services = append(s.services, svc)
	}
	sort.Strings(s.services)
	if s.registry == "" || s.tag == "" {
		return nil, fmt.Errorf("deploy/kustomization.yaml names no images")
	}

	objs, err := Kustomize(deploy, Overlay{})
	if err != nil {
		return nil, err
	}
	seen := map[string]string{}
	baseObj := map[string]*yaml.Node{}
	for _, o := range objs {
		b, err := Encode(o.Node)
		if err != nil {
			return nil, err
		}
		seen[o.Key()] = string(b)
		baseObj[o.Key()] = o.Node
	}
	// Each component's objects: what it adds to deploy/'s, and the fields of
	// deploy/'s it removes (marked in deploy/'s objects, to be rendered only
	// while its value is false).
	condition := map[*yaml.Node]string{}
	for _, c := range Components {
		// In an overlay that names the install's namespace, as a component's
		// objects (a namespaced Issuer, a Secret) need one.
		with, err := Kustomize(deploy, Overlay{Components: []string{c.Dir}, Extra: "namespace: " + b.Namespace + "\n"})
		if err != nil {
			return nil, fmt.Errorf("component %s: %w", c.Dir, err)
		}
		for _, o := range with {
			b, err := Encode(o.Node)
			if err != nil {
				return nil, err
			}
			if was, ok := seen[o.Key()]; ok {
				if was != string(b) {
					var removed []*yaml.Node
					if err := removedKeys(baseObj[o.Key()], o.Node, &removed); err != nil {
						return nil, fmt.Errorf("component %s changes %s: %w (the generator handles components that add objects or remove fields)", c.Dir, o.Key(), err)
					}
					for _, k := range removed {
						k.Value = s.unless("."+c.Value+".enabled") + k.Value
					}
				}
				continue
			}
			condition[o.Node] = "." + c.Value + ".enabled"
			objs = append(objs, o)
		}
	}

	files := map[string][]byte{}
	templates := map[string]*bytes.Buffer{}
	var order []string
	for _, o := range objs {
		if o.Kind() == "CustomResourceDefinition" {
			text, err := Encode(o.Node)
			if err != nil {
				return nil, err
			}
			name := path.Join("crds", path.Base(o.Origin))
			files[name] = append(append(files[name], header...), text...)
			continue
		}
		if err := s.apply(o.Node); err != nil {
			return nil, fmt.Errorf("%s: %w", o.Key(), err)
		}
		text, err := Encode(o.Node)
		if err != nil {
			return nil, err
		}
		text = s.resolve(text)
		if o.Kind() == "Namespace" {
			condition[o.Node] = ".createNamespace"
		}
		if cond, ok := condition[o.Node]; ok {
			text = []byte("{{- if .Values" + cond + " }}\n" + string(text) + "{{- end }}\n")
		}
		name := path.Join("templates", strings.ReplaceAll(strings.TrimPrefix(o.Origin, "components/"), "/", "-"))
		t, ok := templates[name]
		if !ok {
			t = bytes.NewBufferString(header)
			templates[name] = t
			order = append(order, name)
		} else {
			t.WriteString("---\n")
		}
		t.Write(text)
	}
	for _, name := range order {
		files[name] = templates[name].Bytes()
	}
	files["templates/_helpers.tpl"] = []byte(helpers)
	files["Chart.yaml"] = []byte(chartYAML(s.tag))
	values, err := s.values()
	if err != nil {
		return nil, err
	}
	files["values.yaml"] = values
	files[".helmignore"] = []byte(header)
	return files, nil
}

// substitutions turns values of deploy/'s objects into the chart's
// parameters: each is replaced by a token in the tree, and the token by a
// template expression in the text.
type substitutions struct {
	namespace, registry, tag string
	images                   map[string]string // rendered reference -> service
	services                 []string
	resources                map[string]*yaml.Node // container -> its resources
	hostPaths                map[string]string     // value key -> host path
	flags                    map[string]string     // kubelet value -> its default
	exprs                    []string
	blocks                   []string
	conds                    []string
}

func (s *substitutions) token(expr string) string {
	s.exprs = append(s.exprs, expr)
	return fmt.Sprintf("__ncgen%d__", len(s.exprs)-1)
}

// unless marks a key to be rendered only while the value cond is false.
func (s *substitutions) unless(cond string) string {
	s.conds = append(s.conds, cond)
	return fmt.Sprintf("__ncunless%d__", len(s.conds)-1)
}

// removedKeys collects the keys of base that with lacks; anything else
// that differs is an error.
func removedKeys(base, with *yaml.Node, removed *[]*yaml.Node) error {
	if base.Kind != yaml.MappingNode || with.Kind != yaml.MappingNode {
		a, _ := Encode(base)
		b, _ := Encode(with)
		if !bytes.Equal(a, b) {
			return fmt.Errorf("a value changes (%q to %q)", strings.TrimSpace(string(a)), strings.TrimSpace(string(b)))
		}
		return nil
	}
	for i := 0; i+1 < len(with.Content); i += 2 {
		if child(base, with.Content[i].Value) == nil {
			return fmt.Errorf("a field %s is added", with.Content[i].Value)
		}
	}
	for i := 0; i+1 < len(base.Content); i += 2 {
		w := child(with, base.Content[i].Value)
		if w == nil {
			*removed = append(*removed, base.Content[i])
			continue
		}
		if err := removedKeys(base.Content[i+1], w, removed); err != nil {
			return fmt.Errorf("%s: %w", base.Content[i].Value, err)
		}
	}
	return nil
}

func (s *substitutions) block(expr string) string {
	s.blocks = append(s.blocks, expr)
	return fmt.Sprintf("__ncblock%d__", len(s.blocks)-1)
}

// apply substitutes the chart's parameters into one object's tree.
func (s *substitutions) apply(obj *yaml.Node) error {
	if pod := Lookup(obj, "spec", "template", "spec"); pod != nil {
		if err := s.podSpec(pod); err != nil {
			return err
		}
	}
	nsToken := s.token(`include "nodeconfig.namespace" .`)
	walkValues(obj, func(n *yaml.Node) {
		if svc, ok := s.images[n.Value]; ok {
			setScalar(n, s.token(fmt.Sprintf(`include "nodeconfig.image" (dict "root" . "name" %q)`, svc)))
			return
		}
		if strings.Contains(n.Value, s.namespace) {
			setScalar(n, strings.ReplaceAll(n.Value, s.namespace, nsToken))
		}
	})
	return nil
}

// podSpec substitutes the containers' resources, the hostPath volumes'
// paths (where each container mounts them at the host's path: there its
// flags name them too) and the kubelet's flags.
func (s *substitutions) podSpec(pod *yaml.Node) error {
	containers := append(seq(child(pod, "initContainers")), seq(child(pod, "containers"))...)
	type hostPath struct{ key, path, token string }
	var paths []hostPath
	for _, v := range seq(child(pod, "volumes")) {
		p := Lookup(v, "hostPath", "path")
		if p == nil {
			continue
		}
		key := camel(scalar(v, "name"))
		if was, ok := s.hostPaths[key]; ok && was != p.Value {
			return fmt.Errorf("two hostPath volumes %s: %s and %s", key, was, p.Value)
		}
		s.hostPaths[key] = p.Value
		tok := s.token(".Values.kubelet.hostPaths." + key)
		samePath := true
		for _, c := range containers {
			for _, m := range seq(child(c, "volumeMounts")) {
				if scalar(m, "name") == scalar(v, "name") && scalar(m, "mountPath") != p.Value {
					samePath = false
				}
			}
		}
		if samePath {
			for _, c := range containers {
				for _, m := range seq(child(c, "volumeMounts")) {
					if scalar(m, "name") == scalar(v, "name") {
						setScalar(child(m, "mountPath"), tok)
					}
				}
			}
			paths = append(paths, hostPath{key, p.Value, tok})
		}
		setScalar(p, tok)
	}
	// The longest first: a path inside another is its own.
	sort.Slice(paths, func(i, j int) bool { return len(paths[i].path) > len(paths[j].path) })
	for _, c := range containers {
		name := scalar(c, "name")
		if r := child(c, "resources"); r != nil {
			if was, ok := s.resources[name]; ok {
				a, _ := Encode(was)
				b, _ := Encode(r)
				if !bytes.Equal(a, b) {
					return fmt.Errorf("two containers %s with different resources", name)
				}
			}
			s.resources[name] = copyNode(r)
			*r = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s.block(".Values.resources." + camel(name))}
		}
		for _, list := range []string{"args", "command"} {
			for _, a := range seq(child(c, list)) {
				v := a.Value
				for _, f := range kubeletFlags {
					if val, ok := strings.CutPrefix(v, f.Flag+"="); ok {
						s.flags[f.Value] = val
						v = f.Flag + "=" + s.token(".Values.kubelet."+f.Value)
					}
				}
				for _, p := range paths {
					v = replacePath(v, p.path, p.token)
				}
				if v != a.Value {
					setScalar(a, v)
				}
			}
		}
	}
	return nil
}

// replacePath replaces each occurrence of the path p in s that is a whole
// path or a directory of one (followed by nothing or by '/').
func replacePath(s, p, with string) string {
	var out strings.Builder
	for {
		i := strings.Index(s, p)
		if i < 0 {
			out.WriteString(s)
			return out.String()
		}
		end := i + len(p)
		if end == len(s) || s[end] == '/' {
			out.WriteString(s[:i] + with)
		} else {
			out.WriteString(s[:end])
		}
		s = s[end:]
	}
}

// resolve turns the tokens of an encoded object into template expressions,
// once the object's own braces (Prometheus's templates) are escaped.
func (s *substitutions) resolve(text []byte) []byte {
	text = regexp.MustCompile(`\{\{|\}\}`).ReplaceAllFunc(text, func(b []byte) []byte {
		return []byte(`{{ "` + string(b) + `" }}`)
	})
	text = s.resolveUnless(text)
	blockLine := regexp.MustCompile(`(?m)^(\s*(?:- )?)([^\s:]+): __ncblock(\d+)__$`)
	text = blockLine.ReplaceAllFunc(text, func(line []byte) []byte {
		m := blockLine.FindSubmatch(line)
		i, _ := strconv.Atoi(string(m[3]))
		indent := len(m[1]) + 2
		return fmt.Appendf(nil, "%s%s:\n%s{{- toYaml %s | nindent %d }}", m[1], m[2], strings.Repeat(" ", indent), s.blocks[i], indent)
	})
	return regexp.MustCompile(`__ncgen(\d+)__`).ReplaceAllFunc(text, func(tok []byte) []byte {
		i, _ := strconv.Atoi(string(tok[len("__ncgen") : len(tok)-2]))
		return []byte("{{ " + s.exprs[i] + " }}")
	})
}

// resolveUnless wraps each marked key, with its value (the lines indented
// deeper than it), in an if on its condition's being false.
func (s *substitutions) resolveUnless(text []byte) []byte {
	marked := regexp.MustCompile(`^(\s*)__ncunless(\d+)__(.*)$`)
	lines := strings.Split(string(text), "\n")
	var out []string
	for i := 0; i < len(lines); i++ {
		m := marked.FindStringSubmatch(lines[i])
		if m == nil {
			out = append(out, lines[i])
			continue
		}
		n, _ := strconv.Atoi(m[2])
		indent := m[1]
		out = append(out, indent+"{{- if not .Values"+s.conds[n]+" }}", indent+m[3])
		for i+1 < len(lines) && lines[i+1] != "" && len(lines[i+1])-len(strings.TrimLeft(lines[i+1], " ")) > len(indent) {
			i++
			out = append(out, lines[i])
		}
		out = append(out, indent+"{{- end }}")
	}
	return []byte(strings.Join(out, "\n"))
}

// walkValues calls f on every scalar of n that is a value, not a key.
func walkValues(n *yaml.Node, f func(*yaml.Node)) {
	switch n.Kind {
	case yaml.ScalarNode:
		f(n)
	case yaml.MappingNode:
		for i := 1; i < len(n.Content); i += 2 {
			walkValues(n.Content[i], f)
		}
	case yaml.SequenceNode, yaml.DocumentNode:
		for _, c := range n.Content {
			walkValues(c, f)
		}
	}
}

// setScalar sets a string value, double-quoted: the template expression
// that replaces its token may hold what a plain scalar cannot.
func setScalar(n *yaml.Node, v string) {
	n.Kind, n.Tag, n.Value, n.Style = yaml.ScalarNode, "!!str", v, yaml.DoubleQuotedStyle
}

func seq(n *yaml.Node) []*yaml.Node {
	if n == nil || n.Kind != yaml.SequenceNode {
		return nil
	}
	return n.Content
}

func copyNode(n *yaml.Node) *yaml.Node {
	c := *n
	c.Content = nil
	for _, k := range n.Content {
		c.Content = append(c.Content, copyNode(k))
	}
	return &c
}

// camel makes a Kubernetes name a values key: kubelet-config -> kubeletConfig.
func camel(name string) string {
	parts := strings.Split(name, "-")
	for i := 1; i < len(parts); i++ {
		if parts[i] != "" {
			parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
		}
	}
	return strings.Join(parts, "")
}

const helpers = header + `{{/* The namespace of every namespaced object of the install. */}}
{{- define "nodeconfig.namespace" -}}
{{- required "namespace is required" .Values.namespace -}}
{{- end }}

{{/* One of the install's images: REGISTRY/NAME@DIGEST when its digest is
set, REGISTRY/NAME:TAG otherwise (the chart's appVersion by default). */}}
{{- define "nodeconfig.image" -}}
{{- $v := .root.Values.image -}}
{{- $digest := index ($v.digests | default dict) .name | default "" -}}
{{- if $digest -}}
{{ $v.registry }}/{{ .name }}@{{ $digest }}
{{- else -}}
{{ $v.registry }}/{{ .name }}:{{ $v.tag | default .root.Chart.AppVersion }}
{{- end -}}
{{- end }}
`

func chartYAML(tag string) string {
	return header + `apiVersion: v2
name: ` + Name + `
description: Safe, node-by-node rollout of kubelet configuration (NodeConfig), with rollback to last-known-good.
type: application
# The release sets both (make release VERSION=...).
version: ` + strings.TrimPrefix(tag, "v") + `
appVersion: ` + tag + `
kubeVersion: ">=1.30.0-0"
home: https://github.com/nodeconfig/nodeconfig
`
}

// values writes values.yaml: deploy/'s own values, each explained.
func (s *substitutions) values() ([]byte, error) {
	var b strings.Builder
	b.WriteString(header)
	fmt.Fprintf(&b, `# The namespace of every namespaced object; RBAC subjects and the agents'
# FlowSchemas name it too.
namespace: %s
# Create the namespace (labelled for privileged pods: the agent mounts host
# directories). false when it exists already, as when the agents' CA Secret
# was made in it by hand before the install.
createNamespace: true

image:
  registry: %s
  # Empty: the chart's appVersion.
  tag: ""
  # An image's digest (sha256:...) names it in place of the tag; a release's
  # chart sets them.
  digests:
`, s.namespace, s.registry)
	for _, svc := range s.services {
		fmt.Fprintf(&b, "    %s: \"\"\n", svc)
	}
	b.WriteString("\n# Each container's resources, by container name.\nresources:\n")
	var names []string
	for n := range s.resources {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		text, err := Encode(s.resources[n])
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "  %s:\n%s", camel(n), indent(string(text), "    "))
	}
	b.WriteString(`
kubelet:
  # The host directories the agent mounts, by volume name, each at the same
  # path in its container (its flags name them there too).
  hostPaths:
`)
	var keys []string
	for k := range s.hostPaths {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "    %s: %s\n", k, s.hostPaths[k])
	}
	for _, f := range kubeletFlags {
		if v, ok := s.flags[f.Value]; ok {
			fmt.Fprintf(&b, "  # %s\n  %s: %s\n", f.Doc, f.Value, v)
		}
	}
	for _, c := range Components {
		fmt.Fprintf(&b, "\n# deploy/components/%s.\n%s:\n  enabled: false\n", c.Dir, c.Value)
	}
	return []byte(b.String()), nil
}

func indent(text, by string) string {
	lines := strings.SplitAfter(strings.TrimSuffix(text, "\n"), "\n")
	return by + strings.Join(lines, by) + "\n"
}

// Write replaces the chart in dir with files.
func Write(dir string, files map[string][]byte) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, content, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Stale lists how the chart in dir differs from files: each file missing,
// extra or changed.
func Stale(dir string, files map[string][]byte) ([]string, error) {
	var diffs []string
	found := map[string]bool{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		found[rel] = true
		want, ok := files[rel]
		if !ok {
			diffs = append(diffs, rel+": not generated")
			return nil
		}
		got, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			diffs = append(diffs, rel+": differs")
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	for name := range files {
		if !found[name] {
			diffs = append(diffs, name+": missing")
		}
	}
	sort.Strings(diffs)
	return diffs, nil
}
