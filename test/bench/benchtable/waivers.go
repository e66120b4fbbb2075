package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// waiversFile is the file of waivers next to the saved output
// (docs/bench/waivers.txt): what lets a MISSED figure or a stale run pass
// make test, each with its reason, reviewed like code.
const waiversFile = "waivers.txt"

// A waivers file holds one waiver a line, fields separated by " | "; lines
// starting with # and blank lines are comments:
//
//	missed | FIGURE | LIMIT | WHY
//	open | FIGURE | #ISSUE | WHY
//	stale | SAVED-FILE | RUN | WHY
//
// missed: FIGURE, as the table names it, is MISSED because of a limit of
// this machine, LIMIT (a key of limits), which the same run measured: the
// waiver holds only while that limit alone misses the figure's target.
// open: FIGURE is MISSED and the open issue #ISSUE is the work that is to
// meet it (a target the issue set, not yet met): the table shows it
// MISSED, the waivers' list names the issue, and the waiver must go once
// the figure is met. Nothing checks that the issue is open: the list is
// reviewed with the issue.
// stale: the run RUN (its "# run: " line, as written) of SAVED-FILE (a name
// in docs/bench) is from a dirty tree, from a commit HEAD does not descend
// from, or from before a change of the code its figures measure.
type waivers struct {
	missed map[string]missedWaiver // by figure
	stale  map[staleKey]string     // why, by saved file and run
}

// missedWaiver is a missed or an open waiver: limit is the limit's key,
// or for an open one the issue ("#48").
type missedWaiver struct {
	limit, why string
	open       bool
}

type staleKey struct{ file, run string }

var issueRef = regexp.MustCompile(`^#[0-9]+$`)

// limits are the machine's limits a missed waiver may name: a floor the
// run measured, below which the figure cannot fall on this machine.
var limits = map[string]limit{
	"floor-s": {what: "the API server's write floor", value: func(l map[string]float64) float64 { return l["floor-s"] }},
	"cpu-floor-s": {what: "the CPU floor (all the run's CPU over these cores)",
		value: func(l map[string]float64) float64 { return l["cpu-floor-s"] }},
	"control-plane-cpu-floor-s": {what: "the control plane's CPU floor alone (its share of the CPU floor, the agents elsewhere)",
		value: func(l map[string]float64) float64 {
			agents, cp := l["agents-cpu-s"], l["control-plane-cpu-s"]
			if agents+cp <= 0 {
				return 0
			}
			return l["cpu-floor-s"] * cp / (agents + cp)
		}},
	"failover-floor-x-change": {what: "the killed leader's Lease running out and the new leader's CPU floor, to the change",
		value: func(l map[string]float64) float64 { return l["failover-floor-x-change"] }, ratio: true},
}

type limit struct {
	what  string
	value func(line map[string]float64) float64 // 0: not measured
	ratio bool                                  // a ratio to another figure, not seconds
}

func (l limit) format(v float64) string {
	if l.ratio {
		return fmt.Sprintf("%.2f x", v)
	}
	return fmt.Sprintf("%.1f s", v)
}

// readWaivers reads the waivers file at path; no file is no waiver.
func readWaivers(path string) (waivers, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return waivers{}, nil
	}
	if err != nil {
		return waivers{}, err
	}
	defer f.Close()
	w, err := parseWaivers(f)
	if err != nil {
		return waivers{}, fmt.Errorf("%s: %w", path, err)
	}
	return w, nil
}

func parseWaivers(r io.Reader) (waivers, error) {
	w := waivers{missed: map[string]missedWaiver{}, stale: map[staleKey]string{}}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, " | ")
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		if len(f) != 4 || f[1] == "" || f[2] == "" || len(strings.Fields(f[3])) < 5 {
			return waivers{}, fmt.Errorf("line %d: want \"missed | FIGURE | LIMIT | WHY\", \"open | FIGURE | #ISSUE | WHY\" or \"stale | SAVED-FILE | RUN | WHY\", the why in a sentence: %q", n, line)
		}
		switch f[0] {
		case "missed":
			if _, ok := limits[f[2]]; !ok {
				return waivers{}, fmt.Errorf("line %d: no limit %q (known: floor-s, cpu-floor-s, control-plane-cpu-floor-s)", n, f[2])
			}
			if _, dup := w.missed[f[1]]; dup {
				return waivers{}, fmt.Errorf("line %d: a second waiver of %q", n, f[1])
			}
			w.missed[f[1]] = missedWaiver{limit: f[2], why: f[3]}
		case "open":
			if !issueRef.MatchString(f[2]) {
				return waivers{}, fmt.Errorf("line %d: %q names no issue (#NUMBER)", n, f[2])
			}
			if _, dup := w.missed[f[1]]; dup {
				return waivers{}, fmt.Errorf("line %d: a second waiver of %q", n, f[1])
			}
			w.missed[f[1]] = missedWaiver{limit: f[2], why: f[3], open: true}
		case "stale":
			k := staleKey{f[1], f[2]}
			if _, dup := w.stale[k]; dup {
				return waivers{}, fmt.Errorf("line %d: a second waiver of %s's run %q", n, f[1], f[2])
			}
			w.stale[k] = f[3]
		default:
			return waivers{}, fmt.Errorf("line %d: no kind of waiver %q (missed, stale)", n, f[0])
		}
	}
	return w, sc.Err()
}

// waiversNextTo reads the waivers file in the directory of the saved
// output at path.
func waiversNextTo(path string) (waivers, error) {
	return readWaivers(filepath.Join(filepath.Dir(path), waiversFile))
}

// waiveMiss says whether the missed figure of row r, from a run whose
// metrics are line (that run's alone), is waived: a waiver names it and the limit it
// names, measured in the same run, misses the target too. The note says
// why or why not.
func (w waivers) waiveMiss(r row, line map[string]float64) (waived bool, note string) {
	mw, ok := w.missed[r.figure]
	if !ok {
		return false, ""
	}
	if mw.open {
		return true, "open in " + mw.limit
	}
	l := limits[mw.limit]
	v := l.value(line)
	switch {
	case v <= 0:
		return false, fmt.Sprintf("waiver void: the run measured no %s", mw.limit)
	case r.ok(v):
		return false, fmt.Sprintf("waiver void: %s, %s, meets the target", l.what, l.format(v))
	}
	return true, fmt.Sprintf("waived: %s, %s, misses it too", l.what, l.format(v))
}

// unused names the waivers of w that the output o of the saved file named
// file does not use: a missed waiver of a figure that is met, not run or
// not in the table, a stale waiver of a run the file does not hold. A
// waiver outlives its reason otherwise.
func (w waivers) unused(o output, file string) []string {
	var out []string
	for fig := range w.missed {
		var found bool
		for _, r := range rows {
			if r.figure != fig {
				continue
			}
			found = true
			if v, ok := o.last(r.bench)[r.metric]; !ok || r.ok(v) {
				out = append(out, fmt.Sprintf("missed %q: the figure is not MISSED", fig))
			} else if waived, note := w.waiveMiss(r, o.line[r.bench]); !waived {
				out = append(out, fmt.Sprintf("missed %q: %s", fig, note))
			}
		}
		if !found {
			out = append(out, fmt.Sprintf("missed %q: no such figure in the table", fig))
		}
	}
	for k := range w.stale {
		if k.file == file && !slices.Contains(o.runs, k.run) {
			out = append(out, fmt.Sprintf("stale %s %q: no such run in it", k.file, k.run))
		}
	}
	return out
}
