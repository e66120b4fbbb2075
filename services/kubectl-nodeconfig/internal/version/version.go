// Package version says what build of the plugin runs: the version make
// build stamps, else what the Go toolchain recorded (the module's version,
// the commit and whether the tree was modified).
package version

import (
	"runtime"
	"runtime/debug"
)

// Version is set at build time (-ldflags "-X
// nodeconfig.io/services/kubectl-nodeconfig/internal/version.Version=v0.1.0");
// empty, the build info's module version is used.
var Version string

// Info is the plugin's build.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit,omitempty"`
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Get reads the running binary's build.
func Get() Info {
	out := Info{Version: Version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		if out.Version == "" {
			out.Version = "unknown"
		}
		return out
	}
	if out.Version == "" {
		out.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			out.Commit = s.Value
		case "vcs.modified":
			out.Modified = s.Value == "true"
		}
	}
	return out
}
