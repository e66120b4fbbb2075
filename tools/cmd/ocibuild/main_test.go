package main

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// An OCI archive of two platforms: one index naming both, each image of
// its own platform with its own binaries; the printed digest is the
// index's; the same inputs give the same bytes.
func TestOCIArchiveHoldsAnIndexOfEveryPlatform(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bin := map[string][2]string{
		"linux/amd64": {write("amd64/svc", "amd64 service"), write("amd64/helper", "amd64 helper")},
		"linux/arm64": {write("arm64/svc", "arm64 service"), write("arm64/helper", "arm64 helper")},
	}
	build := func(out string) string {
		t.Helper()
		binaries, extras := map[string]string{}, map[string][]string{}
		for p, b := range bin {
			binaries[p], extras[p] = b[0], []string{b[1]}
		}
		stdout := os.Stdout
		r, w, _ := os.Pipe()
		os.Stdout = w
		err := run(binaries, extras, "example.com/ns/svc:v1.2.3", out, "65532:65532", "oci")
		w.Close()
		os.Stdout = stdout
		printed, _ := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(printed))
	}
	first, second := filepath.Join(dir, "a.tar"), filepath.Join(dir, "b.tar")
	digest := build(first)
	if again := build(second); again != digest {
		t.Fatalf("digests %s and %s for the same inputs", digest, again)
	}
	a, _ := os.ReadFile(first)
	b, _ := os.ReadFile(second)
	if !bytes.Equal(a, b) {
		t.Fatal("two archives of the same inputs differ")
	}

	unpacked := filepath.Join(dir, "layout")
	if err := os.MkdirAll(unpacked, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("tar", "-xf", first, "-C", unpacked).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v: %s", err, out)
	}
	root, err := layout.ImageIndexFromPath(unpacked)
	if err != nil {
		t.Fatal(err)
	}
	top, err := root.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(top.Manifests) != 1 {
		t.Fatalf("index.json names %d entries, want the one index", len(top.Manifests))
	}
	d := top.Manifests[0]
	if d.Digest.String() != digest || d.MediaType != types.OCIImageIndex {
		t.Fatalf("index.json names %s %s; printed %s", d.MediaType, d.Digest, digest)
	}
	if d.Annotations["org.opencontainers.image.ref.name"] != "v1.2.3" || d.Annotations["io.containerd.image.name"] != "example.com/ns/svc:v1.2.3" {
		t.Fatalf("annotations %v", d.Annotations)
	}
	idx, err := root.ImageIndex(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 2 {
		t.Fatalf("the index has %d manifests, want 2", len(im.Manifests))
	}
	for _, m := range im.Manifests {
		p := m.Platform.OS + "/" + m.Platform.Architecture
		img, err := idx.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.OS+"/"+cfg.Architecture != p || cfg.Config.Entrypoint[0] != "/service" || cfg.Config.User != "65532:65532" {
			t.Fatalf("%s: config %s/%s entrypoint %v user %s", p, cfg.OS, cfg.Architecture, cfg.Config.Entrypoint, cfg.Config.User)
		}
		if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
			t.Fatalf("%s: manifest media type %s", p, mt)
		}
		files := layerFiles(t, img)
		if files["service"] != strings.Split(p, "/")[1]+" service" || files["helper"] != strings.Split(p, "/")[1]+" helper" {
			t.Fatalf("%s: files %v", p, files)
		}
	}
}

// The docker format keeps one platform.
func TestDockerFormatRefusesTwoPlatforms(t *testing.T) {
	err := run(map[string]string{"linux/amd64": "a", "linux/arm64": "b"}, nil, "example.com/svc:v1", filepath.Join(t.TempDir(), "x.tar"), "0:0", "docker")
	if err == nil || !strings.Contains(err.Error(), "one platform") {
		t.Fatalf("err %v", err)
	}
}

func layerFiles(t *testing.T, img v1.Image) map[string]string {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		files[h.Name] = string(b)
	}
}
