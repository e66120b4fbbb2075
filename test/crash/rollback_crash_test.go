package crash

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"nodeconfig.io/proto/nodeconfig/records"
	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/servekit/atomicfile"
	"nodeconfig.io/test/framework/sim"
)

var rollbackKillsFlag = flag.Int("crash.rollback-kills", 0, "SIGKILLs the rollback crash test sends (0: $CRASH_ROLLBACK_KILLS, else 30)")

func rollbackKills() int {
	if *rollbackKillsFlag > 0 {
		return *rollbackKillsFlag
	}
	if v, err := strconv.Atoi(os.Getenv("CRASH_ROLLBACK_KILLS")); err == nil && v > 0 {
		return v
	}
	return 30
}

// healthTimeout is the gate's --consumer-health-timeout: what a version
// killed before its rollback's verdict costs after the restart, since the
// restarted gate waits this long before it blames the version again.
const healthTimeout = time.Second

// badPayloadFor is version v's payload made invalid YAML, so the node's
// validator refuses it on activation.
func badPayloadFor(v int) string { return payloadFor(v) + "broken: [unclosed\n" }

// describeContent names what a target file holds, bad payloads included.
func describeContent(content []byte) string {
	if f := identify(content); f.whole {
		return f.String()
	}
	first, _, _ := strings.Cut(string(content[:min(len(content), 40)]), "\n")
	if v, err := strconv.Atoi(strings.TrimPrefix(first, "version: ")); err == nil && string(content) == badPayloadFor(v) {
		return fmt.Sprintf("the invalid payload of version %d", v)
	}
	return identify(content).String()
}

// rbKind is what a round makes roll back.
type rbKind int

const (
	// rbActivate: a version that fails validation rolls back inside Activate.
	rbActivate rbKind = iota
	// rbGate: the gate rolls back a version the consumer turns unhealthy on.
	rbGate
	// rbGateLKG: the consumer turns unhealthy on last-known-good itself, and
	// the gate drops it for the local default.
	rbGateLKG
	rbKinds
)

func (k rbKind) String() string {
	return [...]string{"Activate of an invalid version", "gate on an unhealthy version", "gate on an unhealthy last-known-good"}[k]
}

// rbMode is how a round picks the instant of its kill, counted from the
// round's trigger (the Activate call, or the consumer turning unhealthy).
type rbMode int

const (
	// rbInCall kills a fraction into the Activate of the invalid version,
	// of that call's measured duration (rbActivate only).
	rbInCall rbMode = iota
	// rbAtWrite kills at the first change to the target directory: the
	// rollback is switching the file, its verdict recorded, active not yet.
	rbAtWrite
	// rbAtRestart kills when the stand-in consumer exits: the rollback is
	// committed and the gate is restarting the consumer onto the fallback.
	rbAtRestart
	// rbAfterDelay kills at a random delay of up to 1.2 times the whole
	// rollback's measured time: before, inside or after it.
	rbAfterDelay
	rbModes
)

func (m rbMode) String() string {
	return [...]string{"inside the Activate call", "at the rollback's file write", "at the consumer's restart", "after a random delay"}[m]
}

// rbModel is what the test knows of the node, and the stand-in consumer's
// view of the target file. Violations found off the test goroutine are
// kept for it to report.
type rbModel struct {
	mu        sync.Mutex
	target    string
	next      int
	bad       map[int]bool
	poisoned  map[int]bool   // versions the consumer is unhealthy on
	rolledBak map[int]string // versions the node acknowledged as rolled back, and how
	// forbidden are rolled-back versions the node was seen past (or that a
	// restart separates from now): never active or in the file again.
	forbidden map[int]bool
	lkg       int // last-known-good as last seen
	promoting int // the version a promotion is asked for
	last      *nodeconfigv1.Records
	// epoch counts checkpointd's starts; a probe on a connection of an
	// older one comes from a killed process and proves nothing.
	epoch      int
	probes     int // probes of the running checkpointd, each checked
	stale      int // probes of a killed one
	violations []string
	// violated is closed at the first violation: waits end there.
	violated chan struct{}
}

func newRBModel(target string) *rbModel {
	return &rbModel{target: target, next: 1, bad: map[int]bool{}, poisoned: map[int]bool{}, rolledBak: map[int]string{}, forbidden: map[int]bool{}, violated: make(chan struct{})}
}

func (m *rbModel) newVersion(bad bool) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.next
	m.next++
	m.bad[v] = bad
	return v
}

func (m *rbModel) violate(format string, args ...any) {
	if m.violations == nil {
		select {
		case <-m.violated:
		default:
			close(m.violated)
		}
	}
	m.violations = append(m.violations, fmt.Sprintf(format, args...))
}

func (m *rbModel) takeViolations() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.violations
	m.violations = nil
	return v
}

func (m *rbModel) poison(v int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.poisoned[v] = true
}

func (m *rbModel) setPromoting(v int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.promoting = v
}

func (m *rbModel) ackRolledBack(v int, how string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.rolledBak[v]; !ok {
		m.rolledBak[v] = how
	}
}

func (m *rbModel) current() *nodeconfigv1.Records {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last
}

// restarting is called between a kill and the restart: from now on no
// rolled-back version may come back, and the old process's probes are
// ignored.
func (m *rbModel) restarting() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for v := range m.rolledBak {
		m.forbidden[v] = true
	}
	m.epoch++
}

// afterRestart observes the first records of a restarted node. Its start
// finished every rollback whose verdict was durable: from now on no
// version marked failed may be active, nor in the file.
func (m *rbModel) afterRestart(r *nodeconfigv1.Records, where string) {
	m.observe(r, where)
	m.mu.Lock()
	defer m.mu.Unlock()
	for v := range m.rolledBak {
		m.forbidden[v] = true
	}
	if active := version(r.GetActive().GetSource()); m.rolledBak[active] != "" {
		m.violate("%s: version %d is active, though its rollback was durable before the kill (%s)", where, active, m.rolledBak[active])
	}
}

// observe checks one state of the records the node reported against what
// is known, and learns from it. States are observed in the order the node
// reached them: one caller at a time.
func (m *rbModel) observe(r *nodeconfigv1.Records, where string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last = r
	active, lkg := version(r.GetActive().GetSource()), version(r.GetLastKnownGood().GetSource())
	for _, f := range r.GetFailed() {
		if v := version(f.GetSource()); m.rolledBak[v] == "" {
			m.rolledBak[v] = "marked failed (" + f.GetError().GetReason() + ")"
		}
	}
	if m.bad[active] {
		m.violate("%s: the invalid version %d is active (revision %d)", where, active, r.GetRevision())
	}
	if m.forbidden[active] {
		m.violate("%s: version %d is active again, after the node rolled it back (%s) (revision %d)", where, active, m.rolledBak[active], r.GetRevision())
	}
	if lkg != m.lkg {
		switch {
		case lkg != 0 && lkg == m.promoting:
		case lkg == 0 && m.poisoned[m.lkg] && active == 0:
			// Last-known-good itself failed: the node fell back to its
			// local default and forgot it.
			if m.rolledBak[m.lkg] == "" {
				m.rolledBak[m.lkg] = "dropped as last-known-good"
			}
		default:
			m.violate("%s: last-known-good went from version %d to %d (active %d, promoting %d, revision %d): only a promotion replaces it, and only its own failure clears it",
				where, m.lkg, lkg, active, m.promoting, r.GetRevision())
		}
		m.lkg = lkg
	}
	for v := range m.rolledBak {
		if v != active {
			// Active says so only after the file does.
			m.forbidden[v] = true
		}
	}
}

// settled says the node is at rest: the consumer healthy on the active
// config, which it is not unhealthy on, so nothing changes the file until
// the test acts.
func (m *rbModel) settled(r *nodeconfigv1.Records) bool {
	c := r.GetConsumer()
	if c == nil || !records.SameSource(c.GetSource(), r.GetActive().GetSource()) || c.GetPhase() != nodeconfigv1.ConsumerPhase_CONSUMER_PHASE_HEALTHY {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.poisoned[version(r.GetActive().GetSource())]
}

type epochKey struct{}

// health is the stand-in consumer's health endpoint: it runs whatever the
// target file holds, healthy unless that is a version it is unhealthy on.
// It reads the file under the model's lock, so a version the test saw the
// node roll back is past the file before any later read.
func (m *rbModel) health(w http.ResponseWriter, req *http.Request) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, _ := req.Context().Value(epochKey{}).(int); e != m.epoch {
		m.stale++
		http.Error(w, "a probe of a killed checkpointd", http.StatusServiceUnavailable)
		return
	}
	m.probes++
	content, err := os.ReadFile(m.target)
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintln(w, "ok: the local default")
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	f := identify(content)
	switch {
	case !f.whole:
		m.violate("the consumer read %s", describeContent(content))
		http.Error(w, "unreadable config", http.StatusInternalServerError)
	case m.forbidden[f.version]:
		m.violate("the consumer read version %d, which the node rolled back before (%s)", f.version, m.rolledBak[f.version])
		http.Error(w, "a rolled-back config", http.StatusInternalServerError)
	case m.poisoned[f.version]:
		http.Error(w, fmt.Sprintf("unhealthy on version %d", f.version), http.StatusInternalServerError)
	default:
		fmt.Fprintf(w, "ok: version %d\n", f.version)
	}
}

// await watches the records until cond holds, observing every state it
// sees, and returns that state.
func (m *rbModel) await(ctx context.Context, c nodeconfigv1.CheckpointServiceClient, where string, cond func(*nodeconfigv1.Records) bool, opts ...grpc.CallOption) (*nodeconfigv1.Records, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-m.violated:
			cancel(errors.New("an invariant was violated"))
		case <-ctx.Done():
		}
	}()
	stream, err := c.WatchRecords(ctx, &nodeconfigv1.WatchRecordsRequest{}, opts...)
	if err != nil {
		return nil, err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
				err = cause
			}
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		r := resp.GetRecords()
		m.observe(r, where)
		if cond(r) {
			return r, nil
		}
	}
}

// putAssign stores version v (invalid when bad) and assigns it.
func (m *rbModel) putAssign(ctx context.Context, c nodeconfigv1.CheckpointServiceClient, v int, bad bool) (*nodeconfigv1.Records, error) {
	data := payloadFor(v)
	if bad {
		data = badPayloadFor(v)
	}
	src := source(v)
	if _, err := c.PutCheckpoint(ctx, &nodeconfigv1.PutCheckpointRequest{Source: src, Data: map[string]string{"config.yaml": data}}); err != nil {
		return nil, fmt.Errorf("PutCheckpoint %d: %w", v, err)
	}
	resp, err := c.SetAssigned(ctx, &nodeconfigv1.SetAssignedRequest{Source: src, SoakSeconds: 1, Validator: nodeconfigv1.Validator_VALIDATOR_YAML})
	if err != nil {
		return nil, fmt.Errorf("SetAssigned %d: %w", v, err)
	}
	m.observe(resp.GetRecords(), fmt.Sprintf("assigning version %d", v))
	return resp.GetRecords(), nil
}

// activateGood makes a new good version active and waits until the
// consumer runs it healthy.
func (m *rbModel) activateGood(ctx context.Context, c nodeconfigv1.CheckpointServiceClient) (int, *nodeconfigv1.Records, error) {
	v := m.newVersion(false)
	if _, err := m.putAssign(ctx, c, v, false); err != nil {
		return 0, nil, err
	}
	resp, err := c.Activate(ctx, &nodeconfigv1.ActivateRequest{})
	if err != nil {
		return 0, nil, fmt.Errorf("Activate %d: %w", v, err)
	}
	m.observe(resp.GetRecords(), fmt.Sprintf("activating version %d", v))
	if resp.GetOutcome() != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ACTIVATED {
		return 0, nil, fmt.Errorf("activate the good version %d: outcome %v, error %v", v, resp.GetOutcome(), resp.GetRecords().GetError())
	}
	r, err := m.await(ctx, c, fmt.Sprintf("waiting for the consumer on version %d", v), m.settled)
	if err != nil {
		return 0, nil, err
	}
	if got := version(r.GetActive().GetSource()); got != v {
		return 0, nil, fmt.Errorf("the good version %d settled as %d: %v", v, got, r.GetError())
	}
	return v, r, nil
}

// promoteGood makes a new good version last-known-good once it soaked.
func (m *rbModel) promoteGood(ctx context.Context, c nodeconfigv1.CheckpointServiceClient) error {
	v, r, err := m.activateGood(ctx, c)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(records.SoakEnd(r))):
	}
	m.setPromoting(v)
	defer m.setPromoting(0)
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := c.PromoteLastKnownGood(ctx, &nodeconfigv1.PromoteLastKnownGoodRequest{Source: source(v)})
		if err == nil {
			m.observe(resp.GetRecords(), fmt.Sprintf("promoting version %d", v))
			return nil
		}
		// The node's clock ends the soak, a hair after the record says.
		if status.Code(err) != codes.FailedPrecondition || time.Now().After(deadline) {
			return fmt.Errorf("promote %d: %w", v, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// settle waits until the restarted node is at rest and returns its
// records with the target file read while they stood.
func (m *rbModel) settle(ctx context.Context, c nodeconfigv1.CheckpointServiceClient, where string) (*nodeconfigv1.Records, fileState, []byte, error) {
	for {
		r, err := m.await(ctx, c, where, m.settled, grpc.WaitForReady(true))
		if err != nil {
			return nil, fileState{}, nil, err
		}
		content, err := os.ReadFile(m.target)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fileState{}, nil, err
		}
		again, err := c.GetRecords(ctx, &nodeconfigv1.GetRecordsRequest{})
		if err != nil {
			return nil, fileState{}, nil, err
		}
		m.observe(again.GetRecords(), where)
		if again.GetRecords().GetRevision() != r.GetRevision() {
			continue
		}
		f := fileState{}
		if content != nil {
			f = identify(content)
		}
		return r, f, content, nil
	}
}

// standIn is the consumer the gate restarts: a sleep named by a pid file,
// started again whenever it exits, as systemd starts the kubelet again.
type standIn struct {
	pidFile  string
	mu       sync.Mutex
	cmd      *exec.Cmd
	exit     chan struct{} // closed at the next exit
	stopping bool
	stopped  chan struct{}
	err      error
}

func startStandIn(t *testing.T, pidFile string) *standIn {
	s := &standIn{pidFile: pidFile, exit: make(chan struct{}), stopped: make(chan struct{})}
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	go s.babysit()
	t.Cleanup(s.close)
	return s
}

func (s *standIn) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return errStopping
	}
	cmd := exec.Command("sleep", "3600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the stand-in consumer: %w", err)
	}
	s.cmd = cmd
	// Whole or not at all: the gate never reads half a pid.
	tmp := s.pidFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, s.pidFile)
}

var errStopping = errors.New("stopping")

func (s *standIn) babysit() {
	defer close(s.stopped)
	for {
		s.mu.Lock()
		cmd := s.cmd
		s.mu.Unlock()
		_ = cmd.Wait()
		s.mu.Lock()
		close(s.exit)
		s.exit = make(chan struct{})
		s.mu.Unlock()
		if err := s.start(); err != nil {
			if !errors.Is(err, errStopping) {
				s.mu.Lock()
				s.err = err
				s.mu.Unlock()
			}
			return
		}
	}
}

// failed is why the stand-in could not be started again, if it could not.
func (s *standIn) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// nextExit is closed at the stand-in's next exit.
func (s *standIn) nextExit() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exit
}

func (s *standIn) close() {
	s.mu.Lock()
	s.stopping = true
	cmd := s.cmd
	s.mu.Unlock()
	_ = cmd.Process.Kill()
	<-s.stopped
}

// rbRound is one round: a driver goroutine runs its steps up to the
// trigger, hands over to the killer, then triggers the rollback and
// follows it; the killer kills checkpointd at the round's moment.
type rbRound struct {
	kind    rbKind
	prelude bool // rbActivate: a good version is made active first, so the rollback switches the file
	m       *rbModel
	c       nodeconfigv1.CheckpointServiceClient

	trigger chan struct{} // the driver is about to trigger
	proceed chan struct{} // the killer is ready
	done    chan struct{}

	// Set before the trigger, read by the killer after it. through is a
	// version the file holds on the way (0: none).
	pre, fallback, failed, through int
	// exit is closed at the stand-in's first exit after the trigger.
	exit <-chan struct{}
	// Read after done.
	err      error
	answered bool          // rbActivate: the Activate call answered
	callDur  time.Duration // rbActivate: how long it took
	span     time.Duration // trigger to the node at rest again, when reached
}

func (r *rbRound) run(ctx context.Context) {
	defer close(r.done)
	r.err = r.steps(ctx)
}

func (r *rbRound) fire(ctx context.Context) error {
	select {
	case r.trigger <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-r.proceed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *rbRound) steps(ctx context.Context) error {
	m, c := r.m, r.c
	switch r.kind {
	case rbActivate:
		if r.prelude {
			if _, _, err := m.activateGood(ctx, c); err != nil {
				return err
			}
		}
		b := m.newVersion(true)
		recs, err := m.putAssign(ctx, c, b, true)
		if err != nil {
			return err
		}
		r.pre, r.fallback, r.failed = version(recs.GetActive().GetSource()), version(recs.GetLastKnownGood().GetSource()), b
		if err := r.fire(ctx); err != nil {
			return err
		}
		start := time.Now()
		resp, err := c.Activate(ctx, &nodeconfigv1.ActivateRequest{})
		if err != nil {
			return fmt.Errorf("Activate %d: %w", b, err)
		}
		r.answered, r.callDur = true, time.Since(start)
		m.observe(resp.GetRecords(), fmt.Sprintf("activating the invalid version %d", b))
		if resp.GetOutcome() != nodeconfigv1.ActivateOutcome_ACTIVATE_OUTCOME_ROLLED_BACK {
			return fmt.Errorf("activate the invalid version %d: outcome %v, want a rollback", b, resp.GetOutcome())
		}
		m.ackRolledBack(b, "Activate answered ROLLED_BACK")
		if _, err := m.await(ctx, c, fmt.Sprintf("following the rollback of version %d", b), m.settled); err != nil {
			return err
		}
		r.span = time.Since(start)
	case rbGate:
		p, recs, err := m.activateGood(ctx, c)
		if err != nil {
			return err
		}
		r.pre, r.fallback, r.failed = p, version(recs.GetLastKnownGood().GetSource()), p
		if err := r.fire(ctx); err != nil {
			return err
		}
		start := time.Now()
		m.poison(p)
		if _, err := m.await(ctx, c, fmt.Sprintf("following the gate's rollback of version %d", p), m.settled); err != nil {
			return err
		}
		r.span = time.Since(start)
	case rbGateLKG:
		// Last-known-good is given up only when the kubelet will not run
		// it after a restart onto it: a version on trial turns unhealthy,
		// its rollback restarts the consumer onto last-known-good, which
		// is unhealthy too, and the node falls back to its local default.
		x := version(m.current().GetLastKnownGood().GetSource())
		p, _, err := m.activateGood(ctx, c)
		if err != nil {
			return err
		}
		r.pre, r.fallback, r.failed, r.through = p, 0, x, x
		if err := r.fire(ctx); err != nil {
			return err
		}
		start := time.Now()
		m.poison(x)
		m.poison(p)
		if _, err := m.await(ctx, c, fmt.Sprintf("following the gate dropping last-known-good %d", x), m.settled); err != nil {
			return err
		}
		r.span = time.Since(start)
	}
	return nil
}

// holds are the versions the file may hold during the round's rollback.
func (r *rbRound) holds() []int {
	if r.through != 0 {
		return []int{r.pre, r.through, r.fallback}
	}
	return []int{r.pre, r.fallback}
}

// timings are the measured durations the random kills scale with.
type timings struct {
	call []time.Duration // Activate of an invalid version
	span [rbKinds][]time.Duration
}

func (tm *timings) add(r *rbRound) {
	if r.answered {
		tm.call = append(tm.call, r.callDur)
	}
	if r.span > 0 {
		tm.span[r.kind] = append(tm.span[r.kind], r.span)
	}
}

// killAt waits for the round's moment and SIGKILLs pid. It reports
// whether the moment came (false: the round was over first, the kill
// lands after it).
func (r *rbRound) killAt(pid int, mode rbMode, frac float64, s *standIn, tm *timings, targetDir string) (bool, error) {
	deadline := time.Now().Add(30 * time.Second)
	select {
	case <-r.trigger:
	case <-r.done:
		return false, fmt.Errorf("the round ended before its trigger: %v", r.err)
	case <-time.After(time.Until(deadline)):
		return false, errors.New("no trigger within 30 s")
	}
	exit := s.nextExit()
	r.exit = exit
	var watch *dirWatch
	if mode == rbAtWrite {
		var err error
		if watch, err = watchTarget(targetDir); err != nil {
			close(r.proceed)
			return false, err
		}
		defer watch.Close()
		go func() {
			<-r.done
			_ = watch.f.SetReadDeadline(time.Now())
		}()
	}
	close(r.proceed)
	came := true
	switch mode {
	case rbInCall:
		time.Sleep(time.Duration(frac * float64(median(tm.call, 20*time.Millisecond))))
	case rbAtWrite:
		if err := watch.wait(deadline); err != nil {
			select {
			case <-r.done:
				came = false
			default:
				return false, fmt.Errorf("no change to the target directory: %w", err)
			}
		}
	case rbAtRestart:
		select {
		case <-exit:
		case <-r.done:
			// The round may be over because the restart came: look again.
			select {
			case <-exit:
			default:
				came = false
			}
		case <-time.After(time.Until(deadline)):
			return false, errors.New("the consumer was not restarted within 30 s")
		}
	case rbAfterDelay:
		time.Sleep(time.Duration(frac * 1.2 * float64(median(tm.span[r.kind], 300*time.Millisecond))))
	}
	return came, sigkill(pid)
}

// watchTarget is watchDir with removals too: a rollback to the local
// default removes the file.
func watchTarget(dir string) (*dirWatch, error) {
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	const mask = syscall.IN_CREATE | syscall.IN_MODIFY | syscall.IN_MOVED_TO | syscall.IN_ATTRIB | syscall.IN_DELETE
	if _, err := syscall.InotifyAddWatch(fd, dir, mask); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("inotify_add_watch %s: %w", dir, err)
	}
	return &dirWatch{f: os.NewFile(uintptr(fd), "inotify:"+dir)}, nil
}

// TestCheckpointdSurvivesSIGKILLInsideRollbacks kills checkpointd inside
// rollbacks: of a version that fails validation, inside Activate; and of
// a version the consumer turns unhealthy on, or of last-known-good itself,
// inside the consumer gate (a stand-in consumer behind a pid file, restarted
// when the gate signals it, and a health endpoint that answers for the
// version the target file holds). Each kill lands at the round's moment
// (see rbMode): before, inside or after the rollback. After each restart:
// a version the node ever said it rolled back is never active again, nor
// read from the file by the consumer; once at rest the file is the active
// payload (none for the local default); last-known-good is only replaced
// by a promotion, or cleared when it itself failed; and between the kill
// and the restart the file is whole, the version before or after the
// rollback.
//
// Replay a failure with CRASH_SEED=<seed>; CRASH_ROLLBACK_KILLS (or
// -crash.rollback-kills) sets the number of kills.
func TestCheckpointdSurvivesSIGKILLInsideRollbacks(t *testing.T) {
	began := time.Now()
	kills, seed := rollbackKills(), crashSeed(t)
	t.Logf("seed %d: replay with CRASH_SEED=%d; %d kills", seed, seed, kills)
	rng := rand.New(rand.NewPCG(seed, seed^0x5bd1e9955bd1e995))
	dir := t.TempDir()
	targetDir := filepath.Join(dir, "target")
	if err := os.MkdirAll(targetDir, 0o755); err != nil {
		t.Fatal(err)
	}
	m := newRBModel(filepath.Join(targetDir, sim.TargetFile))

	srv := httptest.NewUnstartedServer(http.HandlerFunc(m.health))
	srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		m.mu.Lock()
		defer m.mu.Unlock()
		return context.WithValue(ctx, epochKey{}, m.epoch)
	}
	srv.Start()
	t.Cleanup(srv.Close)
	pidFile := filepath.Join(dir, "consumer.pid")
	stand := startStandIn(t, pidFile)
	p, socket, client := sim.LoneCheckpointd(t, dir,
		"--consumer-restart=signal", "--consumer-pid-file="+pidFile, "--consumer-health-url="+srv.URL+"/healthz",
		"--consumer-probe-period=50ms", "--consumer-health-timeout="+healthTimeout.String(), "--consumer-failure-threshold=1")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	fail := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if v := m.takeViolations(); len(v) > 0 {
			msg += "\nviolations:\n  " + strings.Join(v, "\n  ")
		}
		t.Fatalf("%s\ncheckpointd's log:\n%s", msg, p.Tail(4000))
	}
	checkViolations := func(where string) {
		t.Helper()
		m.mu.Lock()
		n := len(m.violations)
		m.mu.Unlock()
		if n > 0 {
			fail("%s", where)
		}
		if err := stand.failed(); err != nil {
			fail("%s: the stand-in consumer: %v", where, err)
		}
	}

	// Last-known-good first, then unkilled rounds of both rollbacks to
	// measure what the random kills scale with.
	if _, err := m.await(ctx, client, "the first start", m.settled); err != nil {
		fail("%v", err)
	}
	if err := m.promoteGood(ctx, client); err != nil {
		fail("%v", err)
	}
	var tm timings
	for _, warm := range []*rbRound{{kind: rbActivate, prelude: true}, {kind: rbGate}, {kind: rbActivate, prelude: true}, {kind: rbGate}} {
		warm.m, warm.c = m, client
		warm.trigger, warm.proceed, warm.done = make(chan struct{}), make(chan struct{}), make(chan struct{})
		roundCtx, roundCancel := context.WithTimeout(ctx, 30*time.Second)
		go warm.run(roundCtx)
		select {
		case <-warm.trigger:
			close(warm.proceed)
		case <-warm.done:
		}
		<-warm.done
		roundCancel()
		if warm.err != nil {
			fail("warm-up %v: %v", warm.kind, warm.err)
		}
		tm.add(warm)
	}
	tm.span[rbGateLKG] = tm.span[rbGate]
	checkViolations("warming up")
	t.Logf("warm-up: Activate of an invalid version %v; trigger to rest: %v %v, %v %v",
		median(tm.call, 0), rbActivate, median(tm.span[rbActivate], 0), rbGate, median(tm.span[rbGate], 0))

	type tally struct{ kills, came int }
	var (
		byKindMode  [rbKinds][rbModes]tally
		stages      = map[string]int{}
		promotions  int
		stayedOnPre int
		restarts    []time.Duration
	)
	for kill := 0; kill < kills; kill++ {
		where := func() string { return fmt.Sprintf("kill %d of %d (seed %d)", kill+1, kills, seed) }
		cur := m.current()
		lkg, active := version(cur.GetLastKnownGood().GetSource()), version(cur.GetActive().GetSource())
		if (lkg == 0 && rng.IntN(2) == 0) || rng.IntN(10) == 0 {
			promoteCtx, promoteCancel := context.WithTimeout(ctx, 30*time.Second)
			err := m.promoteGood(promoteCtx, client)
			promoteCancel()
			if err != nil {
				fail("%s: promote: %v", where(), err)
			}
			promotions++
			cur = m.current()
			lkg, active = version(cur.GetLastKnownGood().GetSource()), version(cur.GetActive().GetSource())
		}
		kind := rbKind(rng.IntN(2))
		if lkg != 0 && active == lkg && rng.IntN(6) == 0 {
			kind = rbGateLKG
		}
		r := &rbRound{kind: kind, prelude: kind == rbActivate && rng.IntN(2) == 0, m: m, c: client,
			trigger: make(chan struct{}), proceed: make(chan struct{}), done: make(chan struct{})}
		// Only a rollback that switches the file has a write and a restart to
		// kill at; only Activate has a call.
		modes := []rbMode{rbAtWrite, rbAtRestart, rbAfterDelay, rbAfterDelay}
		if kind == rbActivate {
			modes = []rbMode{rbInCall, rbInCall, rbAfterDelay}
			if r.prelude {
				modes = append(modes, rbAtWrite, rbAtRestart)
			}
		}
		mode, frac := modes[rng.IntN(len(modes))], rng.Float64()

		pid := p.Pid()
		roundCtx, roundCancel := context.WithTimeout(ctx, 30*time.Second)
		go r.run(roundCtx)
		came, err := r.killAt(pid, mode, frac, stand, &tm, targetDir)
		p.Kill()
		if err != nil {
			<-r.done
			roundCancel()
			fail("%s (%v, %v): %v; the round stopped with: %v", where(), kind, mode, err, r.err)
		}
		select {
		case <-r.done:
		case <-time.After(time.Minute):
			fail("%s: the round's call did not return within a minute of the kill", where())
		}
		roundCancel()
		if r.err != nil && !killedByUs(r.err) {
			fail("%s (%v, %v): the round failed other than by the kill: %v", where(), kind, mode, r.err)
		}
		checkViolations(where())
		tm.add(r)
		byKindMode[kind][mode].kills++
		if came {
			byKindMode[kind][mode].came++
		}
		exited := false
		select {
		case <-r.exit:
			exited = true
		default:
		}

		// Between the kill and the restart: whole, and the version before or
		// after the rollback.
		content, err := os.ReadFile(m.target)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		before := fileState{}
		if content != nil {
			before = identify(content)
		}
		switch {
		case before.exists && !before.whole:
			fail("%s (%v, %v): between the kill and the restart the target is %s", where(), kind, mode, describeContent(content))
		case !slices.Contains(r.holds(), before.version):
			fail("%s (%v, %v): between the kill and the restart the target is %v; the rollback goes from version %d to %d", where(), kind, mode, before, r.pre, r.fallback)
		}
		fileSwitched := r.pre != r.fallback && before.version == r.fallback

		m.restarting()
		restartAt := time.Now()
		if err := p.Restart(); err != nil {
			t.Fatal(err)
		}
		if err := sim.WaitServing("unix://"+socket, 20*time.Second); err != nil {
			fail("%s: checkpointd did not come back: %v", where(), err)
		}
		first, err := client.GetRecords(ctx, &nodeconfigv1.GetRecordsRequest{}, grpc.WaitForReady(true))
		if err != nil {
			fail("%s: GetRecords after the restart: %v", where(), err)
		}
		restarts = append(restarts, time.Since(restartAt))
		m.afterRestart(first.GetRecords(), where()+", first records after the restart")
		checkViolations(where() + ", first records after the restart")
		stage := landed(r, first.GetRecords(), fileSwitched, exited)
		stages[fmt.Sprintf("%v: %s", kind, stage)]++

		settleCtx, settleCancel := context.WithTimeout(ctx, 20*time.Second)
		recs, after, afterContent, err := m.settle(settleCtx, client, where()+", settling after the restart")
		settleCancel()
		if err != nil {
			fail("%s (%v, %v, %s): the node did not come to rest: %v; last records: %v", where(), kind, mode, stage, err, m.current())
		}
		checkViolations(where() + ", settling after the restart")
		checkAtRest(t, fail, fmt.Sprintf("%s (%v, %v, %s)", where(), kind, mode, stage), client, m, recs, after, afterContent, targetDir)
		if kind == rbActivate && r.pre != r.fallback && version(recs.GetActive().GetSource()) == r.pre {
			// An interrupted rollback ends where an uninterrupted one does:
			// on last-known-good, not on the version that soaked before.
			stayedOnPre++
			fail("%s (%v, %v, %s): active is version %d after the restart, want last-known-good %d as an uninterrupted rollback leaves it", where(), kind, mode, stage, r.pre, r.fallback)
		}
	}

	var summary []string
	for k := range rbKinds {
		for md := range rbModes {
			if n := byKindMode[k][md]; n.kills > 0 {
				summary = append(summary, fmt.Sprintf("%v %v %d (moment came %d)", rbKind(k), rbMode(md), n.kills, n.came))
			}
		}
	}
	var landings []string
	for s, n := range stages {
		landings = append(landings, fmt.Sprintf("%s %d", s, n))
	}
	slices.Sort(landings)
	t.Logf("%d SIGKILLs in %v (seed %d), %d promotions, %d versions, %d rolled back: %s",
		kills, time.Since(began).Round(time.Millisecond), seed, promotions, m.next-1, len(m.rolledBak), strings.Join(summary, "; "))
	t.Logf("where the kills landed: %s", strings.Join(landings, "; "))
	m.mu.Lock()
	probes, stale := m.probes, m.stale
	m.mu.Unlock()
	t.Logf("median restart to serving %v; %d probes checked the file, %d of killed processes ignored; Activate rollbacks interrupted that left the node on the version it ran before, not last-known-good: %d",
		median(restarts, 0), probes, stale, stayedOnPre)
}

// landed names where in the rollback a kill landed, from what is durable.
func landed(r *rbRound, first *nodeconfigv1.Records, fileSwitched, exited bool) string {
	switch r.kind {
	case rbActivate:
		switch {
		case r.answered && exited:
			return "after the Activate answered, consumer restarted"
		case r.answered:
			return "after the Activate answered"
		case fileSwitched:
			return "inside the Activate, file switched"
		default:
			return "inside the Activate, file not switched"
		}
	case rbGateLKG:
		switch {
		case exited:
			return "after the rollback, consumer restarted"
		case version(first.GetLastKnownGood().GetSource()) == 0:
			return "inside the rollback, records switched"
		case fileSwitched:
			return "inside the rollback, file removed"
		default:
			return "before the rollback"
		}
	default:
		switch {
		case exited:
			return "after the rollback, consumer restarted"
		case fileSwitched:
			return "inside the rollback, file switched"
		case records.FailedLate(first, source(r.failed), nodeconfigv1.Validator_VALIDATOR_YAML) != nil:
			return "inside the rollback, verdict recorded"
		default:
			return "before the rollback's verdict"
		}
	}
}

// checkAtRest checks a node at rest: the file is the active payload (none
// for the local default) and nothing else is in its directory, no
// rolled-back or invalid version is active or last-known-good, and both
// name their intact payloads.
func checkAtRest(t *testing.T, fail func(string, ...any), where string, c nodeconfigv1.CheckpointServiceClient, m *rbModel, recs *nodeconfigv1.Records, f fileState, content []byte, targetDir string) {
	t.Helper()
	active, lkg := version(recs.GetActive().GetSource()), version(recs.GetLastKnownGood().GetSource())
	switch {
	case active == 0 && f.exists:
		fail("%s: at rest the local default is active, but the target is %s", where, describeContent(content))
	case active != 0 && (!f.whole || f.version != active):
		fail("%s: at rest the target is %s, not the payload of active version %d", where, describeContent(content), active)
	}
	m.mu.Lock()
	how, rolled := m.rolledBak[active]
	lkgHow, lkgRolled := m.rolledBak[lkg]
	m.mu.Unlock()
	if active != 0 && rolled {
		fail("%s: at rest version %d is active, though the node rolled it back (%s)", where, active, how)
	}
	if lkg != 0 && lkgRolled {
		fail("%s: at rest version %d is last-known-good, though the node rolled it back (%s)", where, lkg, lkgHow)
	}
	if temps, _ := filepath.Glob(atomicfile.TempGlob(filepath.Join(targetDir, sim.TargetFile))); len(temps) > 0 {
		fail("%s: temp files left at rest: %v", where, temps)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, v := range map[string]int{"active": active, "lastKnownGood": lkg} {
		if v == 0 {
			continue
		}
		cp, err := c.GetCheckpoint(ctx, &nodeconfigv1.GetCheckpointRequest{Uid: source(v).GetUid(), ResourceVersion: strconv.Itoa(v)})
		if err != nil {
			fail("%s: %s names version %d, whose payload is gone: %v", where, name, v, err)
		}
		if got := identify([]byte(cp.GetData()["config.yaml"])); !got.whole || got.version != v {
			fail("%s: %s names version %d, whose stored payload is %v", where, name, v, got)
		}
	}
}
