package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"time"
)

// peakWatch follows the reconciler's resident set while the run goes on,
// so that its peak can be told apart from what is left after the change:
// when the peak was reached, in which phase, and (with -profile) the heap
// profile, the runtime's gauges and the smaps summary of the moment the
// resident set last grew past its highest.
type peakWatch struct {
	pid     int
	metrics string // the reconciler's metrics address
	profile bool

	mu      sync.Mutex
	phase   string
	started time.Time
	best    peakSample
}

// peakSample is what was seen at the highest resident set so far.
type peakSample struct {
	rss     int64 // KiB
	at      time.Duration
	phase   string
	heap    []byte // a heap profile, with -profile
	runtime string // the runtime's memory gauges
	smaps   string // /proc/PID/smaps_rollup
}

// samplePeriod is how often the resident set is read; growthToSample is
// how much it must grow past the last sampled peak before the profile and
// gauges are taken again (each a request the reconciler answers).
const (
	samplePeriod   = 250 * time.Millisecond
	growthToSample = 1 << 10 // KiB
)

// watchPeak starts following the reconciler's memory until ctx ends.
func watchPeak(ctx context.Context, pid int, metricsAddr string, profile bool) *peakWatch {
	w := &peakWatch{pid: pid, metrics: metricsAddr, profile: profile, started: time.Now(), phase: "startReconciler"}
	go func() {
		t := time.NewTicker(samplePeriod)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				w.sample()
			}
		}
	}()
	return w
}

// enter names the phase the run is now in.
func (w *peakWatch) enter(phase func() error) {
	if w == nil {
		return
	}
	name := runtime.FuncForPC(reflect.ValueOf(phase).Pointer()).Name()
	name = strings.TrimSuffix(name[strings.LastIndexByte(name, '.')+1:], "-fm")
	w.mu.Lock()
	w.phase = name
	w.mu.Unlock()
}

func (w *peakWatch) sample() {
	m, err := memory(w.pid)
	if err != nil {
		return
	}
	w.mu.Lock()
	grown := m.rss >= w.best.rss+growthToSample || w.best.rss == 0
	higher := m.rss > w.best.rss
	phase := w.phase
	w.mu.Unlock()
	if !higher {
		return
	}
	s := peakSample{rss: m.rss, at: time.Since(w.started), phase: phase}
	if !grown {
		// Not worth new profiles: keep the last ones, with the new figure.
		w.mu.Lock()
		s.heap, s.runtime, s.smaps = w.best.heap, w.best.runtime, w.best.smaps
		w.best = s
		w.mu.Unlock()
		return
	}
	if b, err := fetch("http://" + w.metrics + "/metrics"); err == nil {
		s.runtime = runtimeMemory(b)
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", w.pid)); err == nil {
		s.smaps = string(b)
	}
	if w.profile {
		if b, err := fetch("http://" + w.metrics + "/debug/pprof/heap"); err == nil {
			s.heap = b
		}
	}
	w.mu.Lock()
	w.best = s
	w.mu.Unlock()
}

// report prints when the peak was reached and what the runtime held then,
// and with -profile saves that moment's heap profile and smaps into dir.
func (w *peakWatch) report(dir string) error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	s := w.best
	w.mu.Unlock()
	fmt.Printf("    (highest sampled: %d MiB, %s after its start, in %s; then: %s)\n", s.rss>>10, s.at.Round(time.Second), s.phase, s.runtime)
	if !w.profile || s.heap == nil {
		return nil
	}
	if err := os.WriteFile(filepath.Join(dir, "reconciler.peak.heap.pprof"), s.heap, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "reconciler.peak.smaps"), []byte(s.smaps), 0o644)
}
