// Command dist assembles a release directory beside its images' OCI
// archives (make release), and verifies one.
//
//	dist assemble -version v0.2.0 -dir dist -registry ghcr.io/nodeconfig -plugin linux/amd64=bin/release/linux-amd64/kubectl-nodeconfig ...
//	dist verify -version v0.2.0 -dir dist -image-platforms linux/amd64,linux/arm64 -plugin-platforms linux/amd64,...
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"nodeconfig.io/tools/release/dist"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: dist assemble|verify [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "assemble":
		err = assemble(os.Args[2:])
	case "verify":
		err = verify(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: assemble or verify", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "dist:", err)
		os.Exit(1)
	}
}

func assemble(args []string) error {
	fs := flag.NewFlagSet("assemble", flag.ExitOnError)
	var o dist.Options
	fs.StringVar(&o.Version, "version", "", "the release's version, vX.Y.Z")
	fs.StringVar(&o.Registry, "registry", "ghcr.io/nodeconfig", "the images' registry")
	fs.StringVar(&o.Dir, "dir", "dist", "the release's directory, holding the images' archives")
	fs.StringVar(&o.Deploy, "deploy", "deploy", "the kustomize base")
	fs.StringVar(&o.Chart, "chart", "deploy/helm/nodeconfig", "the generated chart")
	fs.StringVar(&o.License, "license", "LICENSE", "the license the plugin's archives hold")
	fs.StringVar(&o.URL, "url", "", "where the release's files are downloaded from (krew's uri without the file name)")
	o.Plugins = map[string]string{}
	fs.Func("plugin", "PLATFORM=PATH of the kubectl plugin's binary (repeatable)", func(v string) error {
		p, path, ok := strings.Cut(v, "=")
		if !ok {
			return fmt.Errorf("%q: PLATFORM=PATH", v)
		}
		o.Plugins[p] = path
		return nil
	})
	_ = fs.Parse(args)
	if o.Version == "" || o.URL == "" || len(o.Plugins) == 0 {
		return fmt.Errorf("assemble needs -version, -url and -plugin")
	}
	return dist.Assemble(o)
}

func verify(args []string) error {
	fs := flag.NewFlagSet("verify", flag.ExitOnError)
	var e dist.Expect
	dir := fs.String("dir", "dist", "the release's directory")
	fs.StringVar(&e.Version, "version", "", "the release's version, vX.Y.Z")
	services := fs.String("services", "checkpointd,reconciler,statusd", "the images' services")
	images := fs.String("image-platforms", "linux/amd64,linux/arm64", "each image's platforms")
	plugins := fs.String("plugin-platforms", "darwin/amd64,darwin/arm64,linux/amd64,linux/arm64", "the kubectl plugin's platforms")
	_ = fs.Parse(args)
	if e.Version == "" {
		return fmt.Errorf("verify needs -version")
	}
	list := func(s string) []string {
		l := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
		sort.Strings(l)
		return l
	}
	e.Services, e.ImagePlatforms, e.PluginPlatforms = list(*services), list(*images), list(*plugins)
	if err := dist.Verify(*dir, e); err != nil {
		return err
	}
	fmt.Printf("%s: %d files of %s verified\n", filepath.Clean(*dir), len(e.Files()), e.Version)
	return nil
}
