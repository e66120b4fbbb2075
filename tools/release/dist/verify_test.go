package dist

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// SHA256SUMS must list every other file, once, with its sum.
func TestVerifySumsCatchesAChangedAndAnUnlistedFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.txt", "a")
	write("b.txt", "b")
	if err := writeSums(dir); err != nil {
		t.Fatal(err)
	}
	files := []string{"a.txt", "b.txt", SumsFile}
	if err := verifySums(dir, files); err != nil {
		t.Fatalf("a release as written: %v", err)
	}
	write("b.txt", "B")
	if err := verifySums(dir, files); err == nil || !strings.Contains(err.Error(), "b.txt: sha256") {
		t.Fatalf("a changed file: %v", err)
	}
	write("b.txt", "b")
	write("c.txt", "c")
	if err := verifySums(dir, append(files, "c.txt")); err == nil || !strings.Contains(err.Error(), "does not list c.txt") {
		t.Fatalf("an unlisted file: %v", err)
	}
}

// An executable is judged by its own header: this test's binary is one of
// this machine's platform, and of no other.
func TestCheckExecutableReadsTheHeader(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	here := runtime.GOOS + "/" + runtime.GOARCH
	if err := checkExecutable(b[:64], here); err != nil {
		t.Fatalf("%s: %v", here, err)
	}
	for _, other := range []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"} {
		if other == here {
			continue
		}
		if err := checkExecutable(b[:64], other); err == nil {
			t.Errorf("this %s binary passes as %s", here, other)
		}
	}
}
