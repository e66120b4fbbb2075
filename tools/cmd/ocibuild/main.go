// Command ocibuild packs static binaries into container images with no
// Docker engine: a scratch image of one layer, the binary as entrypoint, a
// non-root user. --add puts another binary beside it, which the entrypoint
// finds next to itself (the reconciler's nodeconfig-kubelet-check).
//
// --format docker (the default) writes one platform's image as a tarball
// that 'docker load', 'podman load' and 'ctr images import' accept.
// --format oci writes an OCI image layout as a tar (an OCI archive) whose
// index.json names one image index with every platform given, and prints
// the index's digest: the release names its images by it.
//
// A --binary or --add value is PLATFORM=PATH (linux/arm64=bin/x) or a bare
// PATH, which is linux/amd64's.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// defaultPlatform is a bare path's platform, as before platforms were named.
const defaultPlatform = "linux/amd64"

// A fixed time keeps every image, and so its digest, reproducible.
var epoch = time.Unix(0, 0)

func main() {
	binaries := map[string]string{}
	extras := map[string][]string{}
	flag.Func("binary", "the static binary to pack: [PLATFORM=]PATH, once per platform", func(v string) error {
		p, path, err := platformPath(v)
		if err != nil {
			return err
		}
		if _, dup := binaries[p]; dup {
			return fmt.Errorf("two binaries for %s", p)
		}
		binaries[p] = path
		return nil
	})
	flag.Func("add", "another binary, put in / under its own name, next to the entrypoint: [PLATFORM=]PATH (repeatable)", func(v string) error {
		p, path, err := platformPath(v)
		if err != nil {
			return err
		}
		extras[p] = append(extras[p], path)
		return nil
	})
	ref := flag.String("tag", "", "image reference, e.g. ghcr.io/nodeconfig/checkpointd:dev")
	out := flag.String("out", "", "output tarball")
	user := flag.String("user", "65532:65532", "user:group the image runs as")
	format := flag.String("format", "docker", "docker: one platform's image tarball; oci: an OCI archive of an image index of every platform")
	flag.Parse()
	err := run(binaries, extras, *ref, *out, *user, *format)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ocibuild:", err)
		os.Exit(1)
	}
}

func platformPath(v string) (string, string, error) {
	p, path, ok := strings.Cut(v, "=")
	if !ok {
		return defaultPlatform, v, nil
	}
	if _, err := v1.ParsePlatform(p); err != nil || !strings.Contains(p, "/") {
		return "", "", fmt.Errorf("%q: the platform is OS/ARCH, e.g. linux/arm64", v)
	}
	return p, path, nil
}

func run(binaries map[string]string, extras map[string][]string, ref, out, user, format string) error {
	if len(binaries) == 0 || ref == "" || out == "" {
		return fmt.Errorf("--binary, --tag and --out are required")
	}
	for p := range extras {
		if _, ok := binaries[p]; !ok {
			return fmt.Errorf("--add for %s, which has no --binary", p)
		}
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	platforms := make([]string, 0, len(binaries))
	for p := range binaries {
		platforms = append(platforms, p)
	}
	sort.Strings(platforms)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	switch format {
	case "docker":
		if len(platforms) != 1 {
			return fmt.Errorf("--format docker holds one platform; %d given (use --format oci)", len(platforms))
		}
		img, err := image(platforms[0], binaries[platforms[0]], extras[platforms[0]], user, false)
		if err != nil {
			return err
		}
		return tarball.WriteToFile(out, tag, img)
	case "oci":
		var adds []mutate.IndexAddendum
		for _, p := range platforms {
			img, err := image(p, binaries[p], extras[p], user, true)
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			plat, err := v1.ParsePlatform(p)
			if err != nil {
				return err
			}
			adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: plat}})
		}
		idx := mutate.AppendManifests(empty.Index, adds...)
		digest, err := idx.Digest()
		if err != nil {
			return err
		}
		if err := writeOCIArchive(out, tag, idx); err != nil {
			return err
		}
		fmt.Println(digest)
		return nil
	default:
		return fmt.Errorf("--format %q: docker or oci", format)
	}
}

// image is one platform's image: binary at /service, extra beside it.
func image(platform, binary string, extra []string, user string, oci bool) (v1.Image, error) {
	plat, err := v1.ParsePlatform(platform)
	if err != nil {
		return nil, err
	}
	// The same path as the Dockerfile, which cannot name it per service.
	entry := "/service"
	layerTar, err := rootfs(entry, binary, extra)
	if err != nil {
		return nil, err
	}
	var layerOpts []tarball.LayerOption
	base := empty.Image
	if oci {
		layerOpts = append(layerOpts, tarball.WithMediaType(types.OCILayer))
		base = mutate.ConfigMediaType(mutate.MediaType(base, types.OCIManifestSchema1), types.OCIConfigJSON)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerTar)), nil }, layerOpts...)
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return nil, err
	}
	// Keep the diff IDs AppendLayers computed; set the rest of the config.
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS, cfg.Variant, cfg.Created = plat.Architecture, plat.OS, plat.Variant, v1.Time{Time: epoch}
	cfg.Config = v1.Config{Entrypoint: []string{entry}, User: user, WorkingDir: "/"}
	return mutate.ConfigFile(img, cfg)
}

// rootfs is the image's one layer: a world-writable /tmp, the binary at
// entry and each extra binary in / under its own name.
func rootfs(entry, binary string, extra []string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777, ModTime: epoch}); err != nil {
		return nil, err
	}
	files := map[string]string{entry[1:]: binary}
	names := []string{entry[1:]}
	for _, p := range extra {
		n := filepath.Base(p)
		if _, dup := files[n]; dup || n == "tmp" {
			return nil, fmt.Errorf("--add %s: /%s is already in the image", p, n)
		}
		files[n] = p
		names = append(names, n)
	}
	for _, n := range names {
		content, err := os.ReadFile(files[n])
		if err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o755, Size: int64(len(content)), ModTime: epoch}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(content); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeOCIArchive writes idx as an OCI image layout, tarred into out. Its
// index.json names the index by tag twice: the OCI way (the tag alone) and
// containerd's (the full name, which 'ctr images import' takes as is).
func writeOCIArchive(out string, tag name.Tag, idx v1.ImageIndex) error {
	dir, err := os.MkdirTemp(filepath.Dir(out), ".ocibuild-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	err = p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag.TagStr(),
		"io.containerd.image.name":          tag.Name(),
	}))
	if err != nil {
		return err
	}
	return tarDir(dir, out)
}

// tarDir writes dir's files into the tar out in name order with fixed
// owners and times, so that the same layout gives the same bytes.
func tarDir(dir, out string) error {
	var paths []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		paths = append(paths, path)
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(paths)
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(f)
	for _, path := range paths {
		rel, _ := filepath.Rel(dir, path)
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, ModTime: epoch}
		if fi.IsDir() {
			hdr.Name += "/"
			hdr.Typeflag, hdr.Mode = tar.TypeDir, 0o755
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			continue
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		content, err := os.Open(path)
		if err != nil {
			return err
		}
		_, err = io.Copy(tw, content)
		content.Close()
		if err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}
