package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Each saved run (a "# run:" line of docs/bench/*.txt, which make bench,
// make fleet-bench and make store-bench write) names the commit it ran at,
// as git describe --always --dirty gives it. A run is current when that
// commit is clean, HEAD descends from it, and none of the code its figures
// measure (measures) changed since; otherwise it is stale and passes only
// with a waiver of docs/bench/waivers.txt naming the run, and a waiver of
// a current run fails too.
func TestSavedRunsAreCurrent(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	if out, err := exec.Command("git", "-C", root, "rev-parse", "--verify", "HEAD").CombinedOutput(); err != nil {
		t.Skipf("no git history to check the saved runs' commits against (a source tarball?): git rev-parse HEAD: %v: %s", err, out)
	}
	bench := filepath.Join(root, "docs", "bench")
	wv, err := readWaivers(filepath.Join(bench, waiversFile))
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(bench, "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[staleKey]bool{}
	for _, path := range files {
		file := filepath.Base(path)
		if file == waiversFile {
			continue
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		o, err := parse(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for i, run := range o.runs {
			k := staleKey{file, run}
			seen[k] = true
			// A figure a later run saved again is that run's to judge.
			var figures []string
			for _, b := range o.benches[i] {
				if o.lastRun(b) == run {
					figures = append(figures, b)
				}
			}
			stale, err := staleness(root, run, figures)
			if err != nil {
				t.Fatalf("docs/bench/%s, run %q: %v", file, run, err)
			}
			_, waived := wv.stale[k]
			switch {
			case len(stale) > 0 && !waived:
				t.Errorf("docs/bench/%s: the run %q is stale: %s.\nRe-run it, or waive it in docs/bench/%s, saying why:\nstale | %s | %s | WHY",
					file, run, strings.Join(stale, "; "), waiversFile, file, run)
			case len(stale) == 0 && waived:
				t.Errorf("docs/bench/%s: the run %q is current; remove its stale waiver", file, run)
			}
		}
	}
	for k := range wv.stale {
		if !seen[k] {
			t.Errorf("docs/bench/%s: a stale waiver of a run no saved file holds, remove it: %s | %s", waiversFile, k.file, k.run)
		}
	}
}

// describeCommit is the commit of git describe's long form (TAG-N-gHASH).
var describeCommit = regexp.MustCompile(`-g([0-9a-f]{4,})$`)

// staleness says why the run's figures may not be HEAD's, nothing when
// they are: run is its "# run:" line, benches the benchmarks it saved.
// An error is git failing, not the run being stale.
func staleness(root, run string, benches []string) ([]string, error) {
	i := strings.LastIndex(run, " at ")
	if i < 0 {
		return []string{"it names no commit (\" at COMMIT\")"}, nil
	}
	described := run[i+len(" at "):]
	commit, dirty := strings.CutSuffix(described, "-dirty")
	if m := describeCommit.FindStringSubmatch(commit); m != nil {
		commit = m[1]
	}
	var stale []string
	if dirty {
		stale = append(stale, fmt.Sprintf("%s is a tree with changes no commit holds", described))
	}
	if exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}").Run() != nil {
		return append(stale, fmt.Sprintf("%s is no commit of this repository (a shallow clone needs its history: fetch-depth 0)", commit)), nil
	}
	if err := exec.Command("git", "-C", root, "merge-base", "--is-ancestor", commit, "HEAD").Run(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			return nil, fmt.Errorf("git merge-base --is-ancestor %s HEAD: %w", commit, err)
		}
		return append(stale, fmt.Sprintf("HEAD does not descend from %s", commit)), nil
	}
	for _, b := range benches {
		paths := measures[b]
		if len(paths) == 0 {
			continue // no figure of the table
		}
		out, err := exec.Command("git", append([]string{"-C", root, "diff", "--name-only", commit, "HEAD", "--"}, paths...)...).Output()
		if err != nil {
			return nil, fmt.Errorf("git diff %s HEAD: %w", commit, err)
		}
		if changed := strings.Fields(string(out)); len(changed) > 0 {
			stale = append(stale, fmt.Sprintf("%s: %d files it measures changed since %s (%s)", b, len(changed), commit, firstFew(changed, 3)))
		}
	}
	return stale, nil
}

func firstFew(list []string, n int) string {
	if len(list) <= n {
		return strings.Join(list, ", ")
	}
	return strings.Join(list[:n], ", ") + ", ..."
}

// Every figure of the table names the code it measures, and each path of
// it exists: a figure without one would never go stale, a misspelt path
// never changes.
func TestEveryFigureNamesTheCodeItMeasures(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	for _, r := range rows {
		if len(measures[r.bench]) == 0 {
			t.Errorf("figure %q: no measures entry for %s", r.figure, r.bench)
		}
	}
	for b, paths := range measures {
		for _, p := range paths {
			p = strings.TrimPrefix(p, excluding(""))
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(p))); err != nil {
				t.Errorf("measures[%q]: %v", b, err)
			}
		}
	}
}

// A path left out of a benchmark's measures is one its Go package does not
// build: were it imported, a change to it could move the figure unseen.
func TestExcludedPathsAreNotBuilt(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	for pkg, excluded := range notBuilt {
		list := exec.Command("go", "list", "-deps", "-test", "./"+pkg)
		list.Dir = root
		out, err := list.Output()
		if err != nil {
			t.Fatalf("go list -deps -test ./%s: %v", pkg, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			// "path" or, built for a test, "path [test package]".
			dep, _, _ := strings.Cut(line, " ")
			for _, x := range excluded {
				if imp := "nodeconfig.io/" + x; dep == imp || strings.HasPrefix(dep, imp+"/") {
					t.Errorf("%s builds %s, which its figures' measures leave out (notBuilt)", pkg, dep)
				}
			}
		}
	}
}

// staleness against a repository of its own: a clean run at the commit
// HEAD is is current; a change to the code it measures, a -dirty tree, a
// commit HEAD does not descend from and an unknown commit are stale; a
// change elsewhere is not.
func TestStalenessNamesWhyARunIsStale(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skipf("no git: %v", err)
	}
	const bench = "BenchmarkTestOnly"
	measures[bench] = []string{"measured"}
	t.Cleanup(func() { delete(measures, bench) })
	root := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", root, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false"}, args...)...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	commit := func(path, content string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, path), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		git("add", path)
		git("commit", "-q", "-m", path)
		return git("rev-parse", "--short", "HEAD")
	}
	git("init", "-q", "-b", "main")
	measured := commit("measured/code.go", "package measured\n")
	check := func(name, run string, wantStale ...string) {
		t.Helper()
		got, err := staleness(root, run, []string{bench, "BenchmarkNoFigure"})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(got) != len(wantStale) {
			t.Errorf("%s: stale %q, want %d reasons %q", name, got, len(wantStale), wantStale)
			return
		}
		for i, w := range wantStale {
			if !strings.Contains(got[i], w) {
				t.Errorf("%s: reason %q, want it to say %q", name, got[i], w)
			}
		}
	}
	check("at HEAD", "make bench on today at "+measured)
	check("dirty", "make bench on today at "+measured+"-dirty", measured+"-dirty is a tree with changes no commit holds")
	check("described", "make bench on today at v0.1.0-3-g"+measured)
	commit("docs/notes.md", "unmeasured\n")
	check("a change elsewhere", "make bench on today at "+measured)
	commit("measured/code.go", "package measured // changed\n")
	check("the measured code changed", "make bench on today at "+measured, bench+": 1 files it measures changed since "+measured+" (measured/code.go)")
	check("no commit", "make bench on today at 0000000", "0000000 is no commit of this repository")
	check("no commit named", "make bench on today", `it names no commit`)
	git("checkout", "-q", "-b", "side", measured)
	side := commit("side.txt", "a commit main does not hold\n")
	git("checkout", "-q", "main")
	check("not an ancestor", "make bench on today at "+side, "HEAD does not descend from "+side)
}
