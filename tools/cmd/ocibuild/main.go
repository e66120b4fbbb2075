// Command ocibuild packs one static binary into an OCI image tarball that
// 'docker load' and 'podman load' accept, with no Docker engine: a scratch
// image of one layer, the binary as entrypoint, a non-root user. --add puts
// another binary beside it, which the entrypoint finds next to itself (the
// reconciler's nodeconfig-kubelet-check).
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	binary := flag.String("binary", "", "the static binary to pack")
	ref := flag.String("tag", "", "image reference, e.g. ghcr.io/nodeconfig/checkpointd:dev")
	out := flag.String("out", "", "output tarball")
	user := flag.String("user", "65532:65532", "user:group the image runs as")
	var extra []string
	flag.Func("add", "another binary, put in / under its own name, next to the entrypoint (repeatable)", func(p string) error {
		extra = append(extra, p)
		return nil
	})
	flag.Parse()
	if err := build(*binary, extra, *ref, *out, *user); err != nil {
		fmt.Fprintln(os.Stderr, "ocibuild:", err)
		os.Exit(1)
	}
}

func build(binary string, extra []string, ref, out, user string) error {
	if binary == "" || ref == "" || out == "" {
		return fmt.Errorf("--binary, --tag and --out are required")
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	// The same path as the Dockerfile, which cannot name it per service.
	entry := "/service"
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	// A fixed time keeps the image reproducible.
	epoch := time.Unix(0, 0)
	if err := tw.WriteHeader(&tar.Header{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777, ModTime: epoch}); err != nil {
		return err
	}
	files := map[string]string{entry[1:]: binary}
	names := []string{entry[1:]}
	for _, p := range extra {
		n := filepath.Base(p)
		if _, dup := files[n]; dup || n == "tmp" {
			return fmt.Errorf("--add %s: /%s is already in the image", p, n)
		}
		files[n] = p
		names = append(names, n)
	}
	for _, n := range names {
		content, err := os.ReadFile(files[n])
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o755, Size: int64(len(content)), ModTime: epoch}); err != nil {
			return err
		}
		if _, err := tw.Write(content); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	// Keep the diff IDs AppendLayers computed; set the rest of the config.
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS, cfg.Created = "amd64", "linux", v1.Time{Time: epoch}
	cfg.Config = v1.Config{Entrypoint: []string{entry}, User: user, WorkingDir: "/"}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return tarball.WriteToFile(out, tag, img)
}
