// Package crash kills checkpointd with SIGKILL at chosen moments while it
// works, and checks after every kill that nothing durable was lost.
package crash

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/servekit/atomicfile"
	"nodeconfig.io/test/framework/powercut"
	"nodeconfig.io/test/framework/sim"
)

var (
	seedFlag  = flag.Uint64("crash.seed", 0, "seed of the SIGKILL test's choices (0: $CRASH_SEED, else the clock); the test logs the seed it used")
	killsFlag = flag.Int("crash.kills", 0, "SIGKILLs the SIGKILL test sends (0: $CRASH_KILLS, else 200)")
)

// crashSeed is -crash.seed, else $CRASH_SEED, else the clock.
func crashSeed(t *testing.T) uint64 {
	if *seedFlag != 0 {
		return *seedFlag
	}
	if s := os.Getenv("CRASH_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CRASH_SEED=%q: want a decimal uint64", s)
		}
		return v
	}
	return uint64(time.Now().UnixNano())
}

func crashKills() int {
	if *killsFlag > 0 {
		return *killsFlag
	}
	if v, err := strconv.Atoi(os.Getenv("CRASH_KILLS")); err == nil && v > 0 {
		return v
	}
	return 200
}

// floors are the newest versions the records are known to have reached:
// acknowledged by a call, or reported by the store after a restart. The
// test's versions only grow, so none of them may ever go back.
type floors struct{ assigned, active, lastKnownGood int }

func (f *floors) raise(a acked) {
	f.assigned = max(f.assigned, a.assigned)
	f.active = max(f.active, a.active)
	f.lastKnownGood = max(f.lastKnownGood, a.lastKnownGood)
}

// TestCheckpointdSurvivesSIGKILLAtRandomMoments kills checkpointd while a
// worker runs put/assign/activate/promote cycles back to back, at the
// target write, inside a chosen call, or anywhere (see killMode). Between
// the kill and the restart the target file is the whole payload of a
// version no older than the acknowledged active one, or no file before the
// first activation: never a torn one, which checkpointd's start would
// otherwise repair before anyone saw it. After the restart no record
// (assigned, active, lastKnownGood) is older than what was acknowledged or
// seen before, an interrupted activation is finished, every record names
// its intact payload, and the file is the active payload with no temp
// files left. At least half of the kills must interrupt a call in flight.
//
// The seed fixes the modes and delays; replay a failure with
// CRASH_SEED=<seed> or -crash.seed=<seed> (the kills land at the same
// kinds of moments, not the same nanoseconds).
func TestCheckpointdSurvivesSIGKILLAtRandomMoments(t *testing.T) {
	survivesKills(t, crashKills(), false)
}

// TestCheckpointdSurvivesPowerCutsAtRandomMoments is the SIGKILL test with
// a power cut at each kill: before anything reads the target or
// checkpointd starts again, every write it had not fsynced is taken back,
// file data and directory entries alike (test/framework/powercut). A
// SIGKILL alone cannot tell an fsync from none, as the page cache keeps
// every write; this test fails when one is missing where an acknowledged
// record or the active target depends on it.
func TestCheckpointdSurvivesPowerCutsAtRandomMoments(t *testing.T) {
	survivesKills(t, max(crashKills()/2, 1), true)
}

// survivesKills runs the kill rounds; powerCut makes each kill a power
// cut.
func survivesKills(t *testing.T, kills int, powerCut bool) {
	seed := crashSeed(t)
	t.Logf("seed %d: replay with CRASH_SEED=%d (or -crash.seed=%d); %d kills", seed, seed, seed, kills)
	dir := t.TempDir()
	targetDir, stateDir := filepath.Join(dir, "target"), filepath.Join(dir, "state")
	for _, d := range []string{targetDir, stateDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var (
		launch sim.Launcher
		disk   *powercut.Disk
	)
	if powerCut {
		disk = powercut.New(t, stateDir, targetDir)
		launch = disk.Command
	}
	// A fast sweep of unreferenced payloads keeps the store small and adds a
	// writer of its own to what the kills interrupt.
	p, socket, client := sim.LoneCheckpointdThrough(t, dir, launch, "--gc-interval=1s", "--gc-min-age=10s")
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

	var (
		known      floors
		next       = 1 // the next version a worker writes
		cycles     int
		recent     [rpcKinds][]time.Duration
		byMode     [killModes]struct{ kills, inFlight int }
		byCall     [rpcKinds]int
		seenBefore = map[string]int{}
	)
	var before fileState
	for kill := 0; kill < kills; kill++ {
		where := func() string { return fmt.Sprintf("kill %d of %d (seed %d)", kill+1, kills, seed) }
		if err := sim.WaitServing("unix://"+socket, 20*time.Second); err != nil {
			t.Fatalf("%s: checkpointd did not come back: %v\n%s", where(), err, p.Tail(3000))
		}
		known = checkAfterRestart(t, where(), client, targetDir, known, next-1, before)

		mode := pickMode(rng)
		frac := rng.Float64()
		kind, skip := rpcKind(rng.IntN(int(rpcKinds))), rng.IntN(3)
		w := &worker{client: client, promoteEvery: 4, starts: make(chan rpcStart, 64), done: make(chan struct{}), next: next}
		var watch *dirWatch
		if mode == killAtWrite {
			var err error
			if watch, err = watchDir(targetDir); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		pid := p.Pid()
		go w.run(ctx)
		killSeq, err := killRound(w, pid, mode, watch, kind, skip, frac, recent)
		if watch != nil {
			_ = watch.Close()
		}
		if err != nil {
			cancel()
			p.Kill()
			<-w.done
			t.Fatalf("%s (%s): %v; the worker stopped with: %v\n%s", where(), mode, err, w.err, p.Tail(3000))
		}
		p.Kill()
		select {
		case <-w.done:
		case <-time.After(time.Minute):
			t.Fatalf("%s: the worker's call did not return within a minute of the kill", where())
		}
		cancel()
		next = w.next
		cycles += w.cycles
		for k := range recent {
			recent[k] = append(recent[k], w.durations[k]...)
			recent[k] = recent[k][max(0, len(recent[k])-32):]
		}
		if !killedByUs(w.err) {
			t.Fatalf("%s: a call failed other than by the kill: %v", where(), w.err)
		}
		byMode[mode].kills++
		// Calls run one after another: the one that failed was in flight at
		// the kill if it was issued before it.
		if w.failedSeq != 0 && w.failedSeq <= killSeq {
			byMode[mode].inFlight++
			byCall[w.failed]++
		}
		known.raise(w.acked)
		if disk != nil {
			if err := disk.Cut(); err != nil {
				t.Fatalf("%s: %v", where(), err)
			}
		}

		// The file as the consumer would find it if the node stopped here,
		// before checkpointd's start repairs anything.
		before = readTarget(t, targetDir)
		seenBefore[classify(before, known.active)]++
		if temps, _ := filepath.Glob(atomicfile.TempGlob(filepath.Join(targetDir, sim.TargetFile))); len(temps) > 0 {
			// The kill landed between a temp file's creation and its rename.
			seenBefore["temp file left"]++
		}
		switch {
		case !before.exists && known.active > 0:
			t.Fatalf("%s (%s): between the kill and the restart there is no target file, but version %d was active", where(), mode, known.active)
		case before.exists && !before.whole:
			t.Fatalf("%s (%s): between the kill and the restart the target is %s", where(), mode, before)
		case before.exists && (before.version < known.active || before.version >= next):
			t.Fatalf("%s (%s): between the kill and the restart the target is version %d; active was acknowledged at %d and the newest version started is %d",
				where(), mode, before.version, known.active, next-1)
		}
		if err := p.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	if err := sim.WaitServing("unix://"+socket, 20*time.Second); err != nil {
		t.Fatalf("after the last kill: %v\n%s", err, p.Tail(3000))
	}
	checkAfterRestart(t, fmt.Sprintf("after the last kill (seed %d)", seed), client, targetDir, known, next-1, before)

	inFlight := 0
	for _, m := range byMode {
		inFlight += m.inFlight
	}
	t.Logf("%d SIGKILLs over %d completed cycles (%d versions started), seed %d: %d interrupted a call in flight "+
		"(at the target write %d/%d, inside a chosen call %d/%d, anywhere %d/%d); calls interrupted: %v %d, %v %d, %v %d, %v %d; "+
		"target between kill and restart: %v",
		kills, cycles, next-1, seed, inFlight,
		byMode[killAtWrite].inFlight, byMode[killAtWrite].kills, byMode[killInRPC].inFlight, byMode[killInRPC].kills,
		byMode[killAnywhere].inFlight, byMode[killAnywhere].kills,
		rpcPut, byCall[rpcPut], rpcAssign, byCall[rpcAssign], rpcActivate, byCall[rpcActivate], rpcPromote, byCall[rpcPromote], seenBefore)
	t.Logf("median call durations of the last rounds: %v %v, %v %v, %v %v, %v %v",
		rpcPut, median(recent[rpcPut], 0), rpcAssign, median(recent[rpcAssign], 0), rpcActivate, median(recent[rpcActivate], 0), rpcPromote, median(recent[rpcPromote], 0))
	if disk != nil {
		t.Logf("power cuts: %d sync calls recorded", disk.Syncs())
	}
	if 2*inFlight < kills {
		t.Fatalf("only %d of %d kills interrupted a call in flight: the test is not killing checkpointd while it works", inFlight, kills)
	}
}

// killRound waits for the round's moment and sends SIGKILL to pid: the
// first change to the target directory; a fraction frac into the call
// kind of the worker's cycle number skip (of the call's recent median
// duration); or anywhere within frac of three cycles. It returns how many
// calls the worker had issued just before the kill.
func killRound(w *worker, pid int, mode killMode, watch *dirWatch, kind rpcKind, skip int, frac float64, recent [rpcKinds][]time.Duration) (uint64, error) {
	deadline := time.Now().Add(time.Minute)
	switch mode {
	case killAtWrite:
		// A worker that stops early must not leave the wait to its deadline.
		go func() {
			<-w.done
			_ = watch.f.SetReadDeadline(time.Now())
		}()
		if err := watch.wait(deadline); err != nil {
			return 0, fmt.Errorf("no change to the target directory: %w", err)
		}
	case killInRPC:
		delay := time.Duration(frac * float64(median(recent[kind], 2*time.Millisecond)))
		for seen := 0; seen <= skip; {
			select {
			case s := <-w.starts:
				// Only the call running now: a stale start would skew the delay.
				if s.kind == kind && s.seq == w.started.Load() {
					seen++
				}
			case <-w.done:
				return 0, errors.New("the worker stopped before the kill")
			case <-time.After(time.Until(deadline)):
				return 0, fmt.Errorf("no %v started within a minute", kind)
			}
		}
		time.Sleep(delay)
	case killAnywhere:
		var cycle time.Duration
		for k := range recent {
			cycle += median(recent[k], 2*time.Millisecond)
		}
		time.Sleep(time.Duration(frac * float64(3*cycle)))
	}
	select {
	case <-w.done:
		return 0, errors.New("the worker stopped before the kill")
	default:
	}
	seq := w.started.Load()
	return seq, sigkill(pid)
}

// classify names what the file between kill and restart held, for the
// summary: the acknowledged active version, a newer one, or none.
func classify(f fileState, active int) string {
	switch {
	case !f.exists:
		return "none"
	case f.version == active:
		return "active"
	default:
		return "newer"
	}
}

// readTarget reads the target file as a consumer would.
func readTarget(t *testing.T, targetDir string) fileState {
	t.Helper()
	content, err := os.ReadFile(filepath.Join(targetDir, sim.TargetFile))
	if errors.Is(err, fs.ErrNotExist) {
		return fileState{}
	}
	if err != nil {
		t.Fatal(err)
	}
	return identify(content)
}

// checkAfterRestart checks the restarted checkpointd against what was
// known before the kill, and returns the records it reports as the new
// floors.
func checkAfterRestart(t *testing.T, where string, client nodeconfigv1.CheckpointServiceClient, targetDir string, known floors, newest int, before fileState) floors {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The client's connection may still hold the refusal from the kill.
	resp, err := client.GetRecords(ctx, &nodeconfigv1.GetRecordsRequest{}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatalf("%s: GetRecords: %v", where, err)
	}
	recs := resp.GetRecords()
	got := floors{version(recs.GetAssigned().GetSource()), version(recs.GetActive().GetSource()), version(recs.GetLastKnownGood().GetSource())}
	for _, r := range []struct {
		name      string
		got, want int
	}{{"assigned", got.assigned, known.assigned}, {"active", got.active, known.active}, {"lastKnownGood", got.lastKnownGood, known.lastKnownGood}} {
		if r.got < r.want {
			t.Fatalf("%s: %s went back to version %d after the restart; version %d was acknowledged or seen", where, r.name, r.got, r.want)
		}
		if r.got > newest {
			t.Fatalf("%s: %s is version %d, but the newest version started is %d", where, r.name, r.got, newest)
		}
	}
	if e := recs.GetError(); e != nil {
		t.Fatalf("%s: an error record appeared, though every payload loads: %v", where, e)
	}
	if got.active != got.assigned {
		t.Fatalf("%s: the start did not finish the interrupted activation: assigned %d, active %d", where, got.assigned, got.active)
	}
	if got.lastKnownGood > got.active {
		t.Fatalf("%s: last-known-good %d is newer than active %d", where, got.lastKnownGood, got.active)
	}
	if before.whole && before.version > got.active {
		t.Fatalf("%s: before the restart the target held version %d, newer than the active %d the store knows", where, before.version, got.active)
	}
	for name, v := range map[string]int{"assigned": got.assigned, "active": got.active, "lastKnownGood": got.lastKnownGood} {
		if v == 0 {
			continue
		}
		cp, err := client.GetCheckpoint(ctx, &nodeconfigv1.GetCheckpointRequest{Uid: source(v).GetUid(), ResourceVersion: strconv.Itoa(v)})
		if err != nil {
			t.Fatalf("%s: %s names version %d, whose payload is gone: %v", where, name, v, err)
		}
		if f := identify([]byte(cp.GetData()["config.yaml"])); !f.whole || f.version != v {
			t.Fatalf("%s: %s names version %d, whose stored payload is %v", where, name, v, f)
		}
	}
	after := readTarget(t, targetDir)
	switch {
	case got.active == 0 && after.exists:
		t.Fatalf("%s: nothing is active but the target is %v", where, after)
	case got.active != 0 && (!after.whole || after.version != got.active):
		t.Fatalf("%s: after the restart the target is %v, not the whole payload of active version %d", where, after, got.active)
	}
	entries, err := os.ReadDir(targetDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != sim.TargetFile {
			t.Fatalf("%s: %s is left in the target directory after the restart", where, e.Name())
		}
	}
	return got
}
