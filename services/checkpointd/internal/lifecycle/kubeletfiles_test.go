package lifecycle

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/checkpointd/internal/guard"
	"nodeconfig.io/services/checkpointd/internal/kubeletfiles"
	"nodeconfig.io/services/checkpointd/internal/materialize"
)

// locatingFixture is a node that finds the kubelet's files by asking the
// kubelet (here: whatever the test says it runs with).
type locatingFixture struct {
	*fixture
	// kubelet is what Locate answers.
	kubelet func() (kubeletfiles.Located, error)
}

const dropInName = "50-nodeconfig.conf"

var noConfigDir = &kubeletfiles.NoConfigDirError{Suggested: "/etc/kubernetes/kubelet.conf.d"}

func newLocatingFixture(t *testing.T, first error) *locatingFixture {
	t.Helper()
	f := &locatingFixture{fixture: newFixture(t)}
	f.kubelet = func() (kubeletfiles.Located, error) { return kubeletfiles.Located{}, first }
	f.node = New(Options{Store: f.store, Target: materialize.Target{Name: dropInName}, Locate: func() (kubeletfiles.Located, error) { return f.kubelet() },
		Guard: &guard.Writer{Dir: filepath.Join(f.dir, "guard"), NoSync: true}})
	return f
}

// runsWith makes the kubelet read its drop-ins from dir (f.dir/dir).
func (f *locatingFixture) runsWith(t *testing.T, dir string) string {
	t.Helper()
	abs := filepath.Join(f.dir, dir)
	if err := os.MkdirAll(abs, 0o755); err != nil {
		t.Fatal(err)
	}
	f.kubelet = func() (kubeletfiles.Located, error) {
		return kubeletfiles.Located{Host: kubeletfiles.Files{ConfigDir: "/host/" + dir}, Agent: kubeletfiles.Files{ConfigDir: abs}}, nil
	}
	return abs
}

// dropIns lists every drop-in of the node's name under the fixture's
// directory: what it wrote, wherever.
func (f *locatingFixture) dropIns(t *testing.T) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(f.dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == dropInName {
			found = append(found, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

func (f *locatingFixture) wantEarly(t *testing.T, reason, contains string) {
	t.Helper()
	e := f.records(t).GetError().GetError()
	if e.GetPhase() != nodeconfigv1.ErrorPhase_ERROR_PHASE_EARLY || e.GetReason() != reason || !strings.Contains(e.GetMessage(), contains) {
		t.Fatalf("recorded error %v %s %q; want an early %s saying %q", e.GetPhase(), e.GetReason(), e.GetMessage(), reason, contains)
	}
}

// A kubelet without --config-dir reads no drop-in: the node writes none,
// says on its records (statusd's condition) the one flag to add, and
// follows the kubelet once it has one, without a restart of the agent.
func TestAKubeletWithoutConfigDirIsRefused(t *testing.T) {
	f := newLocatingFixture(t, noConfigDir)
	if err := f.node.Recover(); err != nil {
		t.Fatalf("the agent does not start: %v", err)
	}
	const line = "add --config-dir=/etc/kubernetes/kubelet.conf.d to the kubelet's flags (KUBELET_EXTRA_ARGS)"
	f.wantEarly(t, records.ReasonKubeletNoConfigDir, line)

	f.put(t, "1", "a: 1\n")
	if _, err := f.node.Assign(assignment("1", 60)); err != nil {
		t.Fatal(err)
	}
	_, _, err := f.node.Activate()
	var refused *WriteFailedError
	if !errors.As(err, &refused) || refused.Reason != records.ReasonKubeletNoConfigDir || !strings.Contains(err.Error(), line) {
		t.Fatalf("Activate: %v; want a %s early error saying %q", err, records.ReasonKubeletNoConfigDir, line)
	}
	f.wantEarly(t, records.ReasonKubeletNoConfigDir, line)
	if recs := f.records(t); recs.GetActive() != nil {
		t.Fatalf("active %v after a refusal", recs.GetActive())
	}
	if got := f.dropIns(t); len(got) > 0 {
		t.Fatalf("drop-ins written with no --config-dir: %q", got)
	}
	if _, err := f.node.RepairDrift(); err == nil {
		t.Fatal("a drift repair wrote with no --config-dir")
	}
	if _, err := f.node.Preview(ctx, []byte("a: 2\n"), nodeconfigv1.Validator_VALIDATOR_YAML); !errors.Is(err, ErrRefused) {
		t.Fatalf("Preview with no drop-in directory: %v, want a refusal", err)
	}

	dir := f.runsWith(t, "kubelet.conf.d")
	if got, _, err := f.node.Activate(); err != nil || got != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ACTIVATED {
		t.Fatalf("once the kubelet has --config-dir: %v %v, want activated", got, err)
	}
	if got := f.dropIns(t); len(got) != 1 || got[0] != filepath.Join(dir, dropInName) {
		t.Fatalf("drop-ins %q, want one in %s", got, dir)
	}
	if e := f.records(t).GetError(); e != nil {
		t.Fatalf("the refusal is still recorded: %v", e)
	}
}

// A kubelet restarted with another --config-dir is followed at the next
// drift repair: the drop-in is written where it reads now. One restarted
// without it is refused, and that refusal is the node's to clear.
func TestTheDropInFollowsTheKubelet(t *testing.T) {
	f := newLocatingFixture(t, nil)
	a := f.runsWith(t, "a")
	if err := f.node.Recover(); err != nil {
		t.Fatal(err)
	}
	f.put(t, "1", "a: 1\n")
	if _, err := f.node.Assign(assignment("1", 60)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.node.Activate(); err != nil {
		t.Fatal(err)
	}
	b := f.runsWith(t, "b")
	if repaired, err := f.node.RepairDrift(); err != nil || !repaired {
		t.Fatalf("RepairDrift after the kubelet moved: %v %v, want repaired", repaired, err)
	}
	for _, path := range []string{filepath.Join(a, dropInName), filepath.Join(b, dropInName)} {
		if got, err := os.ReadFile(path); err != nil || string(got) != "a: 1\n" {
			t.Fatalf("%s: %q %v", path, got, err)
		}
	}
	// The start guard runs on the host: its trial names the host's path.
	trial, err := os.ReadFile(filepath.Join(f.dir, "guard", "trial.json"))
	if err != nil || !strings.Contains(string(trial), `"/host/b/50-nodeconfig.conf"`) {
		t.Fatalf("the start guard's trial %s (%v) does not name the drop-in where the kubelet reads it now", trial, err)
	}

	f.kubelet = func() (kubeletfiles.Located, error) { return kubeletfiles.Located{}, noConfigDir }
	if _, err := f.node.RepairDrift(); err == nil {
		t.Fatal("no refusal for a kubelet restarted without --config-dir")
	}
	f.wantEarly(t, records.ReasonKubeletNoConfigDir, "add --config-dir=")
	if !records.NodeClears(f.records(t).GetError().GetError().GetReason()) {
		t.Fatal("the refusal is left to the reconciler to clear")
	}
	f.runsWith(t, "b")
	if repaired, err := f.node.RepairDrift(); err != nil || repaired {
		t.Fatalf("RepairDrift with the kubelet back: %v %v, want nothing to repair", repaired, err)
	}
	if e := f.records(t).GetError(); e != nil {
		t.Fatalf("the refusal is still recorded once the kubelet has --config-dir again: %v", e)
	}
}

// Between two runs of the kubelet (a restart) its files are where they
// were; a kubelet never found is an early error, and nothing is written.
func TestAKubeletNotRunning(t *testing.T) {
	f := newLocatingFixture(t, kubeletfiles.ErrNotRunning)
	if err := f.node.Recover(); err != nil {
		t.Fatal(err)
	}
	f.wantEarly(t, records.ReasonNodeFilesUnreadable, "cannot tell where the kubelet reads its files: the kubelet is not running")
	f.put(t, "1", "a: 1\n")
	if _, err := f.node.Assign(assignment("1", 60)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.node.Activate(); err == nil {
		t.Fatal("activated with no kubelet ever found")
	}
	if got := f.dropIns(t); len(got) > 0 {
		t.Fatalf("drop-ins written with no kubelet found: %q", got)
	}
	dir := f.runsWith(t, "kubelet.conf.d")
	if _, _, err := f.node.Activate(); err != nil {
		t.Fatal(err)
	}
	f.kubelet = func() (kubeletfiles.Located, error) { return kubeletfiles.Located{}, kubeletfiles.ErrNotRunning }
	f.put(t, "2", "a: 2\n")
	if _, err := f.node.Assign(assignment("2", 60)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.node.Activate(); err != nil {
		t.Fatalf("activating while the kubelet restarts: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, dropInName)); err != nil || string(got) != "a: 2\n" {
		t.Fatalf("drop-in %q %v", got, err)
	}
}
