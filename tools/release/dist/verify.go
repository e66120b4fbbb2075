package dist

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	"nodeconfig.io/tools/release/helmrender"
)

// Expect is what a release directory must hold.
type Expect struct {
	Version string
	// Services are the images' services; ImagePlatforms each one's platforms.
	Services       []string
	ImagePlatforms []string
	// PluginPlatforms are the kubectl plugin's platforms.
	PluginPlatforms []string
}

// Files is the exact list of files a release holds, sorted.
func (e Expect) Files() []string {
	files := []string{InstallFile, KrewFile, SumsFile, ChartFile(e.Version)}
	for _, s := range e.Services {
		files = append(files, s+"-"+e.Version+Suffix)
	}
	for _, p := range e.PluginPlatforms {
		files = append(files, PluginFile(e.Version, p))
	}
	sort.Strings(files)
	return files
}

// Verify checks the release in dir: exactly the expected files; SHA256SUMS
// right for every other one; each image's index of the expected platforms,
// each platform's image and binary of it; install.yaml naming exactly the
// archives' digests; the chart of this version rendering with its default
// values what install.yaml holds; each plugin archive's binary of its
// platform, and the krew manifest naming each archive with its sum.
func Verify(dir string, e Expect) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var got []string
	for _, en := range entries {
		got = append(got, en.Name())
	}
	sort.Strings(got)
	if want := e.Files(); !reflect.DeepEqual(got, want) {
		return fmt.Errorf("%s holds\n  %s\nwant\n  %s", dir, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	if err := verifySums(dir, got); err != nil {
		return err
	}
	images, err := ReadImages(dir, true)
	if err != nil {
		return err
	}
	refs := map[string]bool{}
	for _, img := range images {
		if !reflect.DeepEqual(img.Platforms, e.ImagePlatforms) {
			return fmt.Errorf("%s: platforms %v, want %v", img.File, img.Platforms, e.ImagePlatforms)
		}
		if !strings.HasSuffix(img.Name, ":"+e.Version) {
			return fmt.Errorf("%s: named %s, not of %s", img.File, img.Name, e.Version)
		}
		refs[img.Ref()] = false
	}
	install, err := os.ReadFile(filepath.Join(dir, InstallFile))
	if err != nil {
		return err
	}
	objs, err := Objects(install)
	if err != nil {
		return fmt.Errorf("%s: %w", InstallFile, err)
	}
	for key, o := range objs {
		for _, image := range podImages(o) {
			if _, ok := refs[image]; !ok {
				return fmt.Errorf("%s: %s runs %s, which is no archive's digest", InstallFile, key, image)
			}
			refs[image] = true
		}
	}
	for ref, used := range refs {
		if !used {
			return fmt.Errorf("%s runs no %s", InstallFile, ref)
		}
	}
	if err := verifyChart(dir, e, objs); err != nil {
		return err
	}
	return verifyPlugins(dir, e)
}

func verifySums(dir string, files []string) error {
	f, err := os.Open(filepath.Join(dir, SumsFile))
	if err != nil {
		return err
	}
	defer f.Close()
	listed := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		s, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok || len(s) != 64 {
			return fmt.Errorf("%s: line %q", SumsFile, sc.Text())
		}
		if _, dup := listed[name]; dup {
			return fmt.Errorf("%s lists %s twice", SumsFile, name)
		}
		listed[name] = s
	}
	for _, name := range files {
		if name == SumsFile {
			continue
		}
		want, ok := listed[name]
		if !ok {
			return fmt.Errorf("%s does not list %s", SumsFile, name)
		}
		delete(listed, name)
		got, err := fileSum(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("%s: sha256 %s, %s says %s", name, got, SumsFile, want)
		}
	}
	for name := range listed {
		return fmt.Errorf("%s lists %s, which is not in the release", SumsFile, name)
	}
	return nil
}

// verifyChart: the package is this version's, and renders with its default
// values the objects of install.yaml.
func verifyChart(dir string, e Expect, install map[string]map[string]any) error {
	c, err := helmrender.Load(filepath.Join(dir, ChartFile(e.Version)))
	if err != nil {
		return err
	}
	if c.Metadata.Version != strings.TrimPrefix(e.Version, "v") || c.Metadata.AppVersion != e.Version {
		return fmt.Errorf("chart version %s, appVersion %s: not %s", c.Metadata.Version, c.Metadata.AppVersion, e.Version)
	}
	rendered, err := helmrender.Render(c, "nodeconfig", "default", nil)
	if err != nil {
		return err
	}
	objs, err := Objects(rendered)
	if err != nil {
		return fmt.Errorf("the chart: %w", err)
	}
	for key, want := range install {
		got, ok := objs[key]
		if !ok {
			return fmt.Errorf("the chart does not render %s", key)
		}
		if !reflect.DeepEqual(got, want) {
			a, _ := yaml.Marshal(want)
			b, _ := yaml.Marshal(got)
			return fmt.Errorf("the chart renders %s otherwise:\n%s\ninstall.yaml:\n%s", key, b, a)
		}
	}
	for key := range objs {
		if _, ok := install[key]; !ok {
			return fmt.Errorf("the chart renders %s, which install.yaml does not hold", key)
		}
	}
	return nil
}

func verifyPlugins(dir string, e Expect) error {
	raw, err := os.ReadFile(filepath.Join(dir, KrewFile))
	if err != nil {
		return err
	}
	var krew struct {
		Kind string
		Spec struct {
			Version   string
			Platforms []struct {
				Selector struct{ MatchLabels map[string]string } `json:"selector"`
				URI      string
				Sha256   string
				Bin      string
			}
		}
	}
	if err := yaml.Unmarshal(raw, &krew); err != nil {
		return fmt.Errorf("%s: %w", KrewFile, err)
	}
	if krew.Kind != "Plugin" || krew.Spec.Version != e.Version || len(krew.Spec.Platforms) != len(e.PluginPlatforms) {
		return fmt.Errorf("%s: kind %s, version %s, %d platforms", KrewFile, krew.Kind, krew.Spec.Version, len(krew.Spec.Platforms))
	}
	for _, p := range krew.Spec.Platforms {
		platform := p.Selector.MatchLabels["os"] + "/" + p.Selector.MatchLabels["arch"]
		name := PluginFile(e.Version, platform)
		if !strings.HasSuffix(p.URI, "/"+name) || p.Bin != PluginName {
			return fmt.Errorf("%s: %s: uri %s, bin %s", KrewFile, platform, p.URI, p.Bin)
		}
		s, err := fileSum(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if s != p.Sha256 {
			return fmt.Errorf("%s: %s's sha256 %s, the archive's %s", KrewFile, platform, p.Sha256, s)
		}
		if err := verifyPluginArchive(filepath.Join(dir, name), platform); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// verifyPluginArchive: the plugin's executable, of its platform, and the LICENSE.
func verifyPluginArchive(path, platform string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	tr := tar.NewReader(gz)
	found := map[string]bool{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		found[h.Name] = true
		if h.Name == PluginName {
			if h.Mode&0o111 == 0 {
				return fmt.Errorf("%s is not executable", h.Name)
			}
			head := make([]byte, 64)
			n, _ := io.ReadFull(tr, head)
			if err := checkExecutable(head[:n], platform); err != nil {
				return err
			}
		}
	}
	if !found[PluginName] || !found["LICENSE"] || len(found) != 2 {
		return fmt.Errorf("holds %v, want %s and LICENSE", found, PluginName)
	}
	return nil
}

// Objects parses a YAML stream into its objects by kind, namespace and name.
func Objects(stream []byte) (map[string]map[string]any, error) {
	out := map[string]map[string]any{}
	for _, doc := range bytes.Split(stream, []byte("\n---")) {
		var o map[string]any
		if err := yaml.Unmarshal(doc, &o); err != nil {
			return nil, fmt.Errorf("%v:\n%s", err, doc)
		}
		if o == nil {
			continue
		}
		meta, _ := o["metadata"].(map[string]any)
		key := fmt.Sprintf("%v/%v/%v", o["kind"], meta["namespace"], meta["name"])
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("%s twice", key)
		}
		out[key] = o
	}
	return out, nil
}

// podImages lists the images an object's pod template runs.
func podImages(o map[string]any) []string {
	spec, _ := o["spec"].(map[string]any)
	tmpl, _ := spec["template"].(map[string]any)
	pod, _ := tmpl["spec"].(map[string]any)
	var images []string
	for _, list := range []string{"initContainers", "containers"} {
		cs, _ := pod[list].([]any)
		for _, c := range cs {
			if img, ok := c.(map[string]any)["image"].(string); ok {
				images = append(images, img)
			}
		}
	}
	return images
}
