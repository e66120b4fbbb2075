package dist

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/template"
	"time"

	"go.yaml.in/yaml/v3"
	"helm.sh/helm/v3/pkg/chartutil"

	"nodeconfig.io/tools/release/chart"
	"nodeconfig.io/tools/release/helmrender"
)

// The release's files beside the images' archives.
const (
	InstallFile = "install.yaml"
	KrewFile    = "kubectl-nodeconfig.krew.yaml"
	SumsFile    = "SHA256SUMS"
	PluginName  = "kubectl-nodeconfig"
)

// ChartFile is the chart package's name, as 'helm package' names it.
func ChartFile(version string) string {
	return chart.Name + "-" + strings.TrimPrefix(version, "v") + ".tgz"
}

// PluginFile is the plugin's archive for platform (os/arch).
func PluginFile(version, platform string) string {
	return PluginName + "_" + version + "_" + strings.ReplaceAll(platform, "/", "_") + ".tar.gz"
}

// Options say what to assemble, and from what.
type Options struct {
	Version  string // vX.Y.Z
	Registry string // the images' registry, e.g. ghcr.io/nodeconfig
	Dir      string // the release's directory, which holds the images' archives
	Deploy   string // the kustomize base, deploy/
	Chart    string // the generated chart's directory
	License  string // the LICENSE file the plugin's archives hold
	// Plugins maps a platform (os/arch) to the plugin's binary for it.
	Plugins map[string]string
	// URL is where the release's files are downloaded from, krew's uri
	// before each archive's name.
	URL string
}

// Assemble writes install.yaml, the chart's package, the plugin's archives,
// the krew manifest and SHA256SUMS into o.Dir, beside the images' archives.
func Assemble(o Options) error {
	images, err := ReadImages(o.Dir, false)
	if err != nil {
		return err
	}
	if len(images) == 0 {
		return fmt.Errorf("no image archives (*%s) in %s", Suffix, o.Dir)
	}
	for _, img := range images {
		if want := o.Registry + "/" + img.Service + ":" + o.Version; img.Name != want {
			return fmt.Errorf("%s names %s, want %s", img.File, img.Name, want)
		}
	}
	if err := writeInstall(o, images); err != nil {
		return fmt.Errorf("install.yaml: %w", err)
	}
	if err := packageChart(o, images); err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	if err := writePlugins(o); err != nil {
		return fmt.Errorf("kubectl plugin: %w", err)
	}
	return writeSums(o.Dir)
}

// writeInstall renders deploy/ as 'kubectl kustomize' does, each image
// named by its archive's digest.
func writeInstall(o Options, images []Image) error {
	var base struct {
		Images []struct {
			NewName string `yaml:"newName"`
		}
	}
	raw, err := os.ReadFile(filepath.Join(o.Deploy, "kustomization.yaml"))
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(raw, &base); err != nil {
		return err
	}
	byService := map[string]Image{}
	for _, img := range images {
		byService[img.Service] = img
	}
	var k strings.Builder
	k.WriteString("images:\n")
	for _, b := range base.Images {
		svc := b.NewName[strings.LastIndex(b.NewName, "/")+1:]
		img, ok := byService[svc]
		if !ok {
			return fmt.Errorf("deploy/ names the image %s, which has no archive", b.NewName)
		}
		delete(byService, svc)
		fmt.Fprintf(&k, "  - {name: %q, newName: %q, digest: %q}\n", b.NewName, repository(img.Name), img.Digest)
	}
	for svc := range byService {
		return fmt.Errorf("the archive of %s names an image deploy/ does not use", svc)
	}
	out, err := chart.Render(o.Deploy, chart.Overlay{Extra: k.String()})
	if err != nil {
		return err
	}
	header := fmt.Sprintf("# nodeconfig %s: kubectl apply -f install.yaml (docs/release.md)\n", o.Version)
	return os.WriteFile(filepath.Join(o.Dir, InstallFile), append([]byte(header), out...), 0o644)
}

// packageChart packages the generated chart (which must be current) as
// this version, its values naming the images by digest.
func packageChart(o Options, images []Image) error {
	files, err := chart.Generate(o.Deploy)
	if err != nil {
		return err
	}
	if stale, err := chart.Stale(o.Chart, files); err != nil || len(stale) > 0 {
		return fmt.Errorf("%s is stale (run 'make chart'): %v %v", o.Chart, stale, err)
	}
	c, err := helmrender.Load(o.Chart)
	if err != nil {
		return err
	}
	c.Metadata.Version = strings.TrimPrefix(o.Version, "v")
	c.Metadata.AppVersion = o.Version
	for _, f := range c.Raw {
		if f.Name != chartutil.ValuesfileName {
			continue
		}
		if f.Data, err = releaseValues(f.Data, o, images); err != nil {
			return err
		}
		if c.Values, err = chartutil.ReadValues(f.Data); err != nil {
			return err
		}
	}
	saved, err := chartutil.Save(c, o.Dir)
	if err != nil {
		return err
	}
	if filepath.Base(saved) != ChartFile(o.Version) {
		return fmt.Errorf("helm saved %s, not %s", saved, ChartFile(o.Version))
	}
	return nil
}

// releaseValues sets the registry, the tag and each image's digest in the
// chart's values.yaml, keeping its comments.
func releaseValues(data []byte, o Options, images []Image) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	set := func(value string, path ...string) error {
		n := chart.Lookup(doc.Content[0], path...)
		if n == nil {
			return fmt.Errorf("values.yaml has no %s", strings.Join(path, "."))
		}
		n.Value, n.Tag, n.Style = value, "!!str", 0
		return nil
	}
	if err := set(o.Registry, "image", "registry"); err != nil {
		return nil, err
	}
	if err := set(o.Version, "image", "tag"); err != nil {
		return nil, err
	}
	for _, img := range images {
		if err := set(img.Digest, "image", "digests", img.Service); err != nil {
			return nil, err
		}
	}
	return chart.Encode(&doc)
}

// writePlugins writes each platform's archive of the plugin (its binary
// and the LICENSE) and the krew manifest naming them with their sums.
func writePlugins(o Options) error {
	license, err := os.ReadFile(o.License)
	if err != nil {
		return err
	}
	var platforms []string
	for p := range o.Plugins {
		platforms = append(platforms, p)
	}
	sort.Strings(platforms)
	type entry struct{ OS, Arch, URI, Sum string }
	var entries []entry
	for _, p := range platforms {
		bin, err := os.ReadFile(o.Plugins[p])
		if err != nil {
			return err
		}
		name := PluginFile(o.Version, p)
		data, err := tarGz([]tarFile{{PluginName, bin, 0o755}, {"LICENSE", license, 0o644}})
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(o.Dir, name), data, 0o644); err != nil {
			return err
		}
		goos, goarch, _ := strings.Cut(p, "/")
		entries = append(entries, entry{goos, goarch, strings.TrimSuffix(o.URL, "/") + "/" + name, sum(data)})
	}
	var out bytes.Buffer
	err = krewTemplate.Execute(&out, map[string]any{"Version": o.Version, "Platforms": entries, "Bin": PluginName})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(o.Dir, KrewFile), out.Bytes(), 0o644)
}

var krewTemplate = template.Must(template.New("krew").Parse(`apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: nodeconfig
spec:
  version: {{ .Version }}
  homepage: https://github.com/nodeconfig/nodeconfig
  shortDescription: Roll kubelet configuration out node by node, with rollback
  description: |
    Shows and steers NodeConfig rollouts: each node's assigned, active and
    last-known-good kubelet configuration, pause and resume, history and
    undo, and a preview of what a NodeConfig would write on a node.
  platforms:
{{- range .Platforms }}
    - selector:
        matchLabels:
          os: {{ .OS }}
          arch: {{ .Arch }}
      uri: {{ .URI }}
      sha256: {{ .Sum }}
      bin: {{ $.Bin }}
      files:
        - {from: {{ $.Bin }}, to: .}
        - {from: LICENSE, to: .}
{{- end }}
`))

type tarFile struct {
	Name string
	Data []byte
	Mode int64
}

// tarGz makes a gzipped tar of files with fixed owners and times: the same
// files give the same bytes.
func tarGz(files []tarFile) ([]byte, error) {
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(gz)
	for _, f := range files {
		h := &tar.Header{Name: f.Name, Mode: f.Mode, Size: int64(len(f.Data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func sum(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}

func fileSum(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return sum(data), nil
}

// writeSums writes SHA256SUMS over every other file of dir, as sha256sum
// writes them ('sha256sum -c SHA256SUMS' checks them).
func writeSums(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var out strings.Builder
	for _, e := range entries {
		if e.IsDir() || e.Name() == SumsFile {
			continue
		}
		s, err := fileSum(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		fmt.Fprintf(&out, "%s  %s\n", s, e.Name())
	}
	return os.WriteFile(filepath.Join(dir, SumsFile), []byte(out.String()), 0o644)
}
