package guard

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestInstallPutsTheGuardOnTheHostOnce(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "nodeconfig-guard")
	if err := os.WriteFile(self, []byte("binary v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	bin, units := filepath.Join(dir, "host", "bin", "nodeconfig-guard"), filepath.Join(dir, "kubelet.service.d")
	if err := os.Mkdir(units, 0o755); err != nil {
		t.Fatal(err)
	}
	changed, err := Install(self, bin, "/var/lib/nodeconfig/bin/nodeconfig-guard", "/var/lib/nodeconfig/guard", units)
	if err != nil || len(changed) != 2 {
		t.Fatalf("first install changed %v, %v; want the binary and the drop-in", changed, err)
	}
	if fi, err := os.Stat(bin); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("installed binary: %v, %v; want mode 0755", fi, err)
	}
	unit, err := os.ReadFile(filepath.Join(units, DropInName))
	if err != nil || !strings.Contains(string(unit), "ExecStartPre=-/var/lib/nodeconfig/bin/nodeconfig-guard --dir /var/lib/nodeconfig/guard\n") {
		t.Fatalf("drop-in %q, %v; want it to run the host's guard", unit, err)
	}
	if changed, err := Install(self, bin, "/var/lib/nodeconfig/bin/nodeconfig-guard", "/var/lib/nodeconfig/guard", units); err != nil || len(changed) != 0 {
		t.Fatalf("a second install changed %v, %v; want nothing", changed, err)
	}
	// A new agent version replaces the binary, and only it.
	if err := os.WriteFile(self, []byte("binary v2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if changed, err := Install(self, bin, "/var/lib/nodeconfig/bin/nodeconfig-guard", "/var/lib/nodeconfig/guard", units); err != nil || !slices.Equal(changed, []string{bin}) {
		t.Fatalf("an upgrade changed %v, %v; want the binary alone", changed, err)
	}
	if got, _ := os.ReadFile(bin); string(got) != "binary v2" {
		t.Fatalf("installed binary holds %q", got)
	}
}
