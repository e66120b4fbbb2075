package guard

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var (
	bad  = []byte("kind: KubeletConfiguration\nthisMakesTheKubeletExit: true\n")
	good = []byte("kind: KubeletConfiguration\nmaxPods: 50\n")
	t0   = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
)

// node is a guard directory and a kubelet drop-in directory.
type node struct {
	t      *testing.T
	dir    string
	target string
	w      Writer
}

func newNode(t *testing.T) *node {
	t.Helper()
	root := t.TempDir()
	n := &node{t: t, dir: filepath.Join(root, "guard"), target: filepath.Join(root, "kubelet.conf.d", "50-nodeconfig.conf")}
	n.w = Writer{Dir: n.dir}
	return n
}

func (n *node) trial(uid string, lkg []byte) Trial {
	return Trial{
		Identity: Identity{Namespace: "kube-system", Name: "kubelet", UID: uid, ResourceVersion: "7", Key: "kubelet"},
		Target:   n.target, LastKnownGood: lkg, LastKnownGoodName: "ConfigMap kube-system/kubelet-good",
	}
}

// activate does what the agent does: set the trial, then write the drop-in.
func (n *node) activate(tr Trial, payload []byte) {
	n.t.Helper()
	if err := n.w.SetTrial(tr); err != nil {
		n.t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(n.target), 0o755); err != nil {
		n.t.Fatal(err)
	}
	if err := os.WriteFile(n.target, payload, 0o644); err != nil {
		n.t.Fatal(err)
	}
}

// start is one kubelet start: the guard runs first.
func (n *node) start(want Action, wantStarts int) Outcome {
	n.t.Helper()
	o := Check(n.dir, t0)
	if o.Action != want || o.Starts != wantStarts {
		n.t.Fatalf("start: got action %d with %d starts (%s), want action %d with %d", o.Action, o.Starts, o.Message, want, wantStarts)
	}
	if strings.Contains(o.Message, "\n") || o.Message == "" {
		n.t.Fatalf("message %q is not one line", o.Message)
	}
	return o
}

func (n *node) dropIn() []byte {
	n.t.Helper()
	data, err := os.ReadFile(n.target)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		n.t.Fatal(err)
	}
	return data
}

func (n *node) markHealthy(id Identity) {
	n.t.Helper()
	if err := n.w.MarkHealthy(id); err != nil {
		n.t.Fatal(err)
	}
}

func TestNoTrialDoesNothing(t *testing.T) {
	n := newNode(t)
	// No directory at all: a node whose agent never ran.
	n.start(NoTrial, 0)
	if _, err := os.Stat(n.dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the guard created %s (%v)", n.dir, err)
	}
	// A trial that ended: nothing counted, nothing written.
	n.activate(n.trial("u1", good), bad)
	if err := n.w.ClearTrial(); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		n.start(NoTrial, 0)
	}
	if entries, _ := os.ReadDir(n.dir); len(entries) != 0 {
		t.Fatalf("guard directory holds %v after a cleared trial", entries)
	}
	if !bytes.Equal(n.dropIn(), bad) {
		t.Fatal("the drop-in changed without a trial")
	}
}

func TestHealthyTrialNeverFallsBack(t *testing.T) {
	n := newNode(t)
	tr := n.trial("u1", good)
	n.activate(tr, bad)
	// The agent's restart onto the config, healthy; then reboots, each
	// seen healthy by the agent once it runs again.
	n.start(Counted, 1)
	n.markHealthy(tr.Identity)
	for range 10 {
		n.start(Counted, 1)
		n.markHealthy(tr.Identity)
	}
	// Restarts by someone else, with the agent slow to look: up to the
	// threshold without a healthy mark is still a start on the trial.
	n.start(Counted, 1)
	n.start(Counted, 2)
	n.start(Counted, 3)
	n.markHealthy(tr.Identity)
	n.start(Counted, 1)
	if !bytes.Equal(n.dropIn(), bad) {
		t.Fatal("the drop-in changed under a healthy trial")
	}
	if fb, err := ReadFallback(n.dir); fb != nil || err != nil {
		t.Fatalf("fallback %+v, %v under a healthy trial", fb, err)
	}
}

func TestCrashLoopFallsBackAfterThreshold(t *testing.T) {
	for _, tc := range []struct {
		name string
		lkg  []byte
	}{
		{"last-known-good", good},
		{"local default", nil},
		{"empty last-known-good is a file", []byte{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			tr := n.trial("u1", tc.lkg)
			n.activate(tr, bad)
			for i := 1; i <= DefaultThreshold; i++ {
				n.start(Counted, i)
				if !bytes.Equal(n.dropIn(), bad) {
					t.Fatalf("start %d: the drop-in changed before the threshold", i)
				}
			}
			n.start(FellBack, DefaultThreshold+1)
			got, err := os.ReadFile(n.target)
			switch {
			case tc.lkg == nil && !errors.Is(err, os.ErrNotExist):
				t.Fatalf("drop-in %q, %v; want it removed for the local default", got, err)
			case tc.lkg != nil && (err != nil || !bytes.Equal(got, tc.lkg)):
				t.Fatalf("drop-in %q, %v; want last-known-good %q", got, err, tc.lkg)
			}
			fb, err := ReadFallback(n.dir)
			if err != nil || fb == nil {
				t.Fatalf("fallback record %+v, %v", fb, err)
			}
			if fb.Identity != tr.Identity || fb.Starts != DefaultThreshold+1 || !fb.At.Equal(t0) || fb.Target != n.target {
				t.Fatalf("fallback record %+v", fb)
			}
			if !strings.Contains(fb.Message, "started 4 times") {
				t.Fatalf("fallback message %q", fb.Message)
			}
			// The agent is not there to clear the trial: every later start
			// falls back again, keeping the first record.
			if err := os.WriteFile(n.target, bad, 0o644); err != nil {
				t.Fatal(err)
			}
			o := Check(n.dir, t0.Add(time.Minute))
			if o.Action != FellBack || !strings.Contains(o.Message, "fell back already") {
				t.Fatalf("start after the fallback: %+v", o)
			}
			if got := n.dropIn(); !bytes.Equal(got, tc.lkg) {
				t.Fatalf("drop-in %q after a second fallback, want %q", got, tc.lkg)
			}
			if again, _ := ReadFallback(n.dir); again == nil || !again.At.Equal(t0) {
				t.Fatalf("the record was rewritten: %+v", again)
			}
			// The kubelet now runs last-known-good: seeing it healthy does
			// not forgive the trial.
			if err := n.w.MarkHealthy(tr.Identity); !errors.Is(err, ErrFellBack) {
				t.Fatalf("MarkHealthy after a fallback: %v, want ErrFellBack", err)
			}
			// The agent records it, ends the trial, clears the record.
			if err := n.w.ClearTrial(); err != nil {
				t.Fatal(err)
			}
			if err := ClearFallback(n.dir, fb); err != nil {
				t.Fatal(err)
			}
			if fb, err := ReadFallback(n.dir); fb != nil || err != nil {
				t.Fatalf("fallback %+v, %v after ClearFallback", fb, err)
			}
			n.start(NoTrial, 0)
		})
	}
}

func TestNewTrialResetsCount(t *testing.T) {
	n := newNode(t)
	x := n.trial("x", good)
	n.activate(x, bad)
	for i := 1; i <= DefaultThreshold; i++ {
		n.start(Counted, i)
	}
	// Another config on trial: its own count.
	y := n.trial("y", good)
	n.activate(y, bad)
	n.start(Counted, 1)

	// The same version on trial again later (promoted, replaced, assigned
	// again): the old trial's starts do not count against it.
	n.activate(x, bad)
	n.start(Counted, 1)
	n.start(Counted, 2)
	if err := n.w.ClearTrial(); err != nil {
		t.Fatal(err)
	}
	n.activate(x, bad)
	n.start(Counted, 1)

	// A trial file that names another config, written without the Writer
	// (an older agent): the guard's own count starts over.
	z := n.trial("z", good)
	if err := writeJSON(filepath.Join(n.dir, TrialFile), trialFile{Version: formatVersion, Trial: z}, true); err != nil {
		t.Fatal(err)
	}
	n.start(Counted, 1)
}

func TestSetTrialAgainKeepsCount(t *testing.T) {
	n := newNode(t)
	tr := n.trial("u1", good)
	n.activate(tr, bad)
	n.start(Counted, 1)
	n.start(Counted, 2)
	before, err := os.Stat(filepath.Join(n.dir, TrialFile))
	if err != nil {
		t.Fatal(err)
	}
	// The agent starting again syncs the same trial: nothing is written.
	if err := n.w.Sync(&tr); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(filepath.Join(n.dir, TrialFile))
	if err != nil || !os.SameFile(before, after) {
		t.Fatalf("the same trial was rewritten (%v)", err)
	}
	n.start(Counted, 3)
	// A new last-known-good under the same trial is rewritten, count kept.
	tr.LastKnownGood = []byte("kind: KubeletConfiguration\n")
	if err := n.w.Sync(&tr); err != nil {
		t.Fatal(err)
	}
	n.start(FellBack, 4)
	if got := n.dropIn(); !bytes.Equal(got, tr.LastKnownGood) {
		t.Fatalf("drop-in %q, want the new last-known-good", got)
	}
	if err := n.w.Sync(nil); err != nil {
		t.Fatal(err)
	}
	n.start(NoTrial, 0)
}

func TestCorruptTrialDoesNothing(t *testing.T) {
	valid := `{"version":1,"identity":{"uid":"u1","resourceVersion":"7","key":"kubelet"},"target":"TARGET","lastKnownGood":null}`
	for name, content := range map[string]string{
		"truncated":       valid[:len(valid)/2],
		"empty":           "",
		"not json":        "\x00\x00\x00",
		"other version":   strings.Replace(valid, `"version":1`, `"version":2`, 1),
		"no uid":          strings.Replace(valid, `"uid":"u1"`, `"uid":""`, 1),
		"relative target": strings.Replace(valid, "TARGET", "kubelet.conf.d/50-nodeconfig.conf", 1),
		"unclean target":  strings.Replace(valid, "TARGET", "/etc/kubernetes/../kubernetes/x.conf", 1),
		"root target":     strings.Replace(valid, "TARGET", "/", 1),
	} {
		t.Run(name, func(t *testing.T) {
			n := newNode(t)
			if err := os.MkdirAll(n.dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Dir(n.target), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(n.target, bad, 0o644); err != nil {
				t.Fatal(err)
			}
			content = strings.Replace(content, "TARGET", n.target, 1)
			if err := os.WriteFile(filepath.Join(n.dir, TrialFile), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			for range DefaultThreshold + 2 {
				o := n.start(Skipped, 0)
				if !strings.Contains(o.Message, "doing nothing") {
					t.Fatalf("message %q", o.Message)
				}
			}
			if !bytes.Equal(n.dropIn(), bad) {
				t.Fatal("the drop-in changed under a corrupt trial")
			}
			var out bytes.Buffer
			Main([]string{"--dir", n.dir}, &out)
			if lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "doing nothing") {
				t.Fatalf("Main wrote %q, want one line saying it does nothing", out.String())
			}
		})
	}
}

func TestTruncatedCounterCountsFromZero(t *testing.T) {
	n := newNode(t)
	tr := n.trial("u1", good)
	n.activate(tr, bad)
	n.start(Counted, 1)
	n.start(Counted, 2)
	n.markHealthy(tr.Identity) // mark at 2
	n.start(Counted, 1)
	n.start(Counted, 2)
	// A torn counter (a disk that lost part of the renamed file).
	path := filepath.Join(n.dir, StartsFile)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data[:len(data)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	o := n.start(Counted, 1)
	if !strings.Contains(o.Message, "counted from 0") {
		t.Fatalf("message %q does not say the count was unreadable", o.Message)
	}
	// The healthy mark at 2 belongs to the lost count: it forgives nothing
	// of the new one, so the crash loop is still caught, one threshold later.
	n.start(Counted, 2)
	n.start(Counted, 3)
	n.start(FellBack, 4)
	if !bytes.Equal(n.dropIn(), good) {
		t.Fatal("no fallback after a torn counter")
	}

	// A torn healthy mark is ignored and rewritten by the next mark.
	n2 := newNode(t)
	tr2 := n2.trial("u2", nil)
	n2.activate(tr2, bad)
	n2.start(Counted, 1)
	if err := os.WriteFile(filepath.Join(n2.dir, HealthyFile), []byte(`{"vers`), 0o600); err != nil {
		t.Fatal(err)
	}
	if o := n2.start(Counted, 2); !strings.Contains(o.Message, "healthy mark unreadable") {
		t.Fatalf("message %q", o.Message)
	}
	n2.markHealthy(tr2.Identity)
	n2.start(Counted, 1)
}

func TestKilledWritersLeaveNothingBehind(t *testing.T) {
	n := newNode(t)
	tr := n.trial("u1", good)
	n.activate(tr, bad)
	// Temps of a guard and an agent killed before their renames.
	for _, name := range []string{"." + StartsFile + "123", "." + TrialFile + "456", "." + FallbackFile + "7"} {
		if err := os.WriteFile(filepath.Join(n.dir, name), []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for range DefaultThreshold + 1 {
		Check(n.dir, t0)
	}
	tr.Identity.UID = "u2"
	if err := n.w.SetTrial(tr); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(n.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("left behind: %s", e.Name())
		}
		if fi, _ := e.Info(); fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", e.Name(), fi.Mode().Perm())
		}
	}
}

func TestFallbackThatCannotWriteTheDropInStillExits(t *testing.T) {
	n := newNode(t)
	tr := n.trial("u1", good)
	// The drop-in's directory is a file: nothing can be written there.
	if err := os.WriteFile(filepath.Dir(n.target), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := n.w.SetTrial(tr); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= DefaultThreshold; i++ {
		n.start(Counted, i)
	}
	o := n.start(FellBack, DefaultThreshold+1)
	if !strings.Contains(o.Message, "failed") {
		t.Fatalf("message %q does not say the fallback failed", o.Message)
	}
	if fb, err := ReadFallback(n.dir); err != nil || fb == nil {
		t.Fatalf("fallback record %+v, %v: the agent must still learn of it", fb, err)
	}
}

func TestThresholdFromTheTrial(t *testing.T) {
	n := newNode(t)
	tr := n.trial("u1", good)
	tr.Threshold = 1
	n.activate(tr, bad)
	n.start(Counted, 1)
	n.start(FellBack, 2)
}

func TestClearFallbackKeepsANewerRecord(t *testing.T) {
	n := newNode(t)
	x := n.trial("x", good)
	x.Threshold = 1
	n.activate(x, bad)
	n.start(Counted, 1)
	n.start(FellBack, 2)
	read, err := ReadFallback(n.dir)
	if err != nil || read == nil {
		t.Fatal(read, err)
	}
	// The guard falls back from another trial before the agent clears.
	y := n.trial("y", good)
	y.Threshold = 1
	n.activate(y, bad)
	if err := os.Remove(filepath.Join(n.dir, FallbackFile)); err != nil {
		t.Fatal(err)
	}
	n.start(Counted, 1)
	n.start(FellBack, 2)
	if err := ClearFallback(n.dir, read); err != nil {
		t.Fatal(err)
	}
	if fb, err := ReadFallback(n.dir); err != nil || fb == nil || fb.Identity != y.Identity {
		t.Fatalf("fallback %+v, %v: want y's record kept", fb, err)
	}
	// A record the agent cannot read is removed with nil.
	if err := os.WriteFile(filepath.Join(n.dir, FallbackFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFallback(n.dir); err == nil {
		t.Fatal("a corrupt record reads without error")
	}
	if err := ClearFallback(n.dir, nil); err != nil {
		t.Fatal(err)
	}
	if fb, err := ReadFallback(n.dir); fb != nil || err != nil {
		t.Fatalf("fallback %+v, %v after ClearFallback(nil)", fb, err)
	}
}

func TestMainWritesOneLineAndNeverFails(t *testing.T) {
	n := newNode(t)
	n.activate(n.trial("u1", good), bad)
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"counts":     {[]string{"--dir", n.dir}, "kubelet start 1 of 3"},
		"no trial":   {[]string{"--dir", filepath.Join(n.dir, "none")}, "no config on trial"},
		"bad flag":   {[]string{"--bogus"}, "doing nothing"},
		"extra args": {[]string{"--dir", n.dir, "now"}, "doing nothing"},
		"help":       {[]string{"-h"}, "usage:"},
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			Main(tc.args, &out)
			s := out.String()
			if strings.Count(s, "\n") != 1 || !strings.HasSuffix(s, "\n") || !strings.HasPrefix(s, "nodeconfig-guard: ") || !strings.Contains(s, tc.want) {
				t.Fatalf("Main(%q) wrote %q, want one line with %q", tc.args, s, tc.want)
			}
		})
	}
}

func TestSystemdDropIn(t *testing.T) {
	got := SystemdDropIn("/var/lib/nodeconfig/bin/nodeconfig-guard", DefaultDir)
	if !strings.Contains(got, "\n[Service]\nExecStartPre=-/var/lib/nodeconfig/bin/nodeconfig-guard --dir /var/lib/nodeconfig/guard\n") {
		t.Fatalf("drop-in:\n%s", got)
	}
	for in, want := range map[string]string{
		"/opt/node config/bin": `"/opt/node config/bin"`,
		`/a"b\c`:               `"/a\"b\\c"`,
		"/100%/$HOME":          "/100%%/$$HOME",
		"":                     `""`,
	} {
		if got := systemdQuote(in); got != want {
			t.Errorf("systemdQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
