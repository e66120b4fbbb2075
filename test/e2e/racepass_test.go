package e2e

import (
	"debug/buildinfo"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"nodeconfig.io/test/framework/proc"
	"nodeconfig.io/test/framework/testenv"
)

// racePassList names the tests of make test's race pass, one a line: the
// Makefile runs exactly these (RACE_E2E) against the binaries of bin/race.
const racePassList = "testdata/race-pass.txt"

// raceChecks are the tests that check the race pass itself: they must run
// in it.
var raceChecks = []string{
	"TestRacePassListsOnlyTestsOfThisPackage",
	"TestRaceBinariesCarryTheRaceDetector",
	"TestRaceCanaryIsCaughtByTheLogScan",
}

// A name of the race pass's list that no test of this package has (a test
// renamed or removed) fails here: -run would drop it out of the pass in
// silence.
func TestRacePassListsOnlyTestsOfThisPackage(t *testing.T) {
	b, err := os.ReadFile(racePassList)
	if err != nil {
		t.Fatal(err)
	}
	defined := testsOfThisPackage(t)
	listed := map[string]bool{}
	for i, name := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		switch {
		case listed[name]:
			t.Errorf("%s:%d: %q is listed twice", racePassList, i+1, name)
		case !defined[name]:
			t.Errorf("%s:%d: %q is no test of this package (renamed or removed?): the race pass would skip it in silence", racePassList, i+1, name)
		}
		listed[name] = true
	}
	for _, name := range raceChecks {
		if !listed[name] {
			t.Errorf("%s does not list %s, which checks the race pass itself", racePassList, name)
		}
	}
}

// testsOfThisPackage reads the names of this package's test functions from
// its source, as go test finds them (the files of this platform).
func testsOfThisPackage(t *testing.T) map[string]bool {
	t.Helper()
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	tests := map[string]bool{}
	for _, name := range append(pkg.TestGoFiles, pkg.XTestGoFiles...) {
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") && fn.Name.Name != "TestMain" {
				tests[fn.Name.Name] = true
			}
		}
	}
	return tests
}

// raceBinDir is where the race pass's binaries are: $NODECONFIG_BIN, which
// only make test's race pass sets (to bin/race), else bin/race, which the
// other passes check ahead of it.
func raceBinDir(t *testing.T) string {
	t.Helper()
	if os.Getenv("NODECONFIG_BIN") != "" {
		dir, _ := proc.BinDir()
		return dir
	}
	root, err := proc.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "bin", "race")
}

// The binaries the race pass starts, and its canary, each built with the
// race detector on.
var raceBuilt = []string{"checkpointd", "statusd", "reconciler", "nodeconfig-kubelet-check", "racecanary"}

// controlPlane is what make build-race links into bin/race as it is: the
// race pass tests nodeconfig's services, not the API server.
var controlPlane = map[string]bool{"etcd": true, "kube-apiserver": true}

// Every binary of the race pass carries the race detector, as its own build
// settings say (go version -m: -race=true).
func TestRaceBinariesCarryTheRaceDetector(t *testing.T) {
	dir := raceBinDir(t)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("%v: run 'make build-race' ('make test' does it)", err)
	}
	found := map[string]bool{}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		if controlPlane[e.Name()] && e.Type()&fs.ModeSymlink != 0 {
			continue
		}
		info, err := buildinfo.ReadFile(path)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		race := false
		for _, s := range info.Settings {
			race = race || (s.Key == "-race" && s.Value == "true")
		}
		if !race {
			t.Errorf("%s was built without -race; its build settings: %v", path, info.Settings)
		}
		found[e.Name()] = true
	}
	for _, name := range raceBuilt {
		if !found[name] {
			t.Errorf("%s is not in %s: run 'make build-race'", name, dir)
		}
	}
}

// The canary, which races on purpose and was built as the services were,
// run as they are (its output in a log under a test's root) and scanned as
// theirs are after every test: the scan must report its race.
func TestRaceCanaryIsCaughtByTheLogScan(t *testing.T) {
	bin := filepath.Join(raceBinDir(t), "racecanary")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%v: run 'make build-race' ('make test' does it)", err)
	}
	root := testenv.ScratchDir(t, "race-canary-")
	p, err := proc.Start("racecanary", bin, nil, filepath.Join(root, "racecanary.log"))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(time.Minute):
		p.Kill()
		t.Fatal("the canary did not exit within a minute")
	}
	report := debugReport(root)
	if report == "" {
		t.Fatalf("the log scan missed the canary's race (exit: %v); its log:\n%s", p.ExitError(), p.Tail(4000))
	}
	if !strings.Contains(report, "racecanary/main.go") {
		t.Fatalf("the log scan reported something other than the canary's race:\n%s", report)
	}
}
