package kubeletexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	nodeconfigv1 "nodeconfig.io/proto/nodeconfig/v1"
	"nodeconfig.io/services/configcheck"
)

// fakeEnv makes this test binary act as nodeconfig-kubelet-check, in the
// way the variable names, when the Runner starts it.
const fakeEnv = "KUBELETEXEC_TEST_FAKE"

func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeEnv); mode != "" {
		os.Exit(fake(mode))
	}
	os.Exit(m.Run())
}

// fake is a validator binary that behaves as mode says.
func fake(mode string) int {
	in, _ := io.ReadAll(os.Stdin)
	switch mode {
	case "judge": // valid unless the payload says "bad"
		if strings.Contains(string(in), "bad") {
			fmt.Println("maxPods: Invalid value: -1: must be >= 0")
			return ExitInvalid
		}
		return ExitValid
	case "silent-refusal":
		return ExitInvalid
	case "cannot-judge":
		fmt.Fprintln(os.Stderr, "read the drop-in: EOF")
		return ExitCannotJudge
	case "panic":
		panic("the kubelet would stop")
	case "hang":
		// Until killed (the test's deadline stops it).
		time.Sleep(time.Hour)
	}
	return 99
}

// runner runs this test binary as a fake validator in mode.
func runner(t *testing.T, mode string, timeout time.Duration) Runner {
	t.Helper()
	t.Setenv(fakeEnv, mode)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Runner{Path: exe, Timeout: timeout}
}

func TestValidAndInvalidAreVerdicts(t *testing.T) {
	r := runner(t, "judge", 0)
	if err := r.Check(context.Background(), []byte("maxPods: 110")); err != nil {
		t.Fatalf("valid payload: %v", err)
	}
	err := r.Check(context.Background(), []byte("bad"))
	if err == nil || err.Error() != "maxPods: Invalid value: -1: must be >= 0" || configcheck.Unavailable(err) {
		t.Fatalf("invalid payload: %v, want the binary's words exactly, as a verdict", err)
	}
	// Through the Checker the reconciler builds: the wording of the
	// kubelet validator in process.
	c := configcheck.Checker{Kubelet: r.Check}
	err = c.Payload(context.Background(), nodeconfigv1.Validator_VALIDATOR_KUBELET, []byte("bad"))
	if err == nil || err.Error() != "invalid KubeletConfiguration: maxPods: Invalid value: -1: must be >= 0" {
		t.Fatalf("through Checker: %v", err)
	}
}

// Whatever keeps the binary from answering is no verdict: neither valid
// nor invalid, and the error names the binary.
func TestNoAnswerIsUnavailableAndNamesTheBinary(t *testing.T) {
	missing := filepath.Join(t.TempDir(), Binary)
	notExecutable := filepath.Join(t.TempDir(), Binary)
	if err := os.WriteFile(notExecutable, []byte("#!/bin/sh\nexit 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		mode string // the fake's; "" runs path
		path string
		want string
	}{
		{"missing", "", missing, "no such file"},
		{"not executable", "", notExecutable, "permission denied"},
		{"crash", "panic", "", "exit status 2: panic: the kubelet would stop"},
		{"cannot judge", "cannot-judge", "", "exit status 2: read the drop-in: EOF"},
		{"unknown exit code", "unknown", "", "exit status 99"},
		{"refusal without a reason", "silent-refusal", "", "exit status 1 without a reason"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Runner{Path: tc.path}
			if tc.mode != "" {
				r = runner(t, tc.mode, 0)
			}
			err := r.Check(context.Background(), []byte("maxPods: 110"))
			var u *configcheck.UnavailableError
			if !errors.As(err, &u) {
				t.Fatalf("err %v, want an UnavailableError", err)
			}
			if u.Validator != "kubelet" || !strings.Contains(err.Error(), r.Path) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %q, want one naming kubelet, %s and %q", err, r.Path, tc.want)
			}
		})
	}
}

// A binary that does not answer is killed at the timeout, and the caller
// learns it at once; so when the caller gives up first.
func TestHangIsKilledAtTheDeadline(t *testing.T) {
	r := runner(t, "hang", 300*time.Millisecond)
	start := time.Now()
	err := r.Check(context.Background(), []byte("maxPods: 110"))
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Check returned after %s, want soon after its 300ms timeout", took)
	}
	if !configcheck.Unavailable(err) || !strings.Contains(err.Error(), "no answer within 300ms") {
		t.Fatalf("err %v, want an UnavailableError saying it did not answer in time", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	r.Timeout = time.Minute
	start = time.Now()
	err = r.Check(ctx, []byte("maxPods: 110"))
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Check returned %s after its caller gave up", took)
	}
	if !configcheck.Unavailable(err) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want an UnavailableError wrapping the caller's cancellation", err)
	}
}

func TestVerify(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "exe")
	plain := filepath.Join(dir, "plain")
	for path, mode := range map[string]os.FileMode{exe: 0o755, plain: 0o644} {
		if err := os.WriteFile(path, nil, mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := Verify(exe); err != nil {
		t.Fatalf("an executable file: %v", err)
	}
	for path, want := range map[string]string{
		filepath.Join(dir, "missing"): "does not exist",
		plain:                         "not an executable file",
		dir:                           "not an executable file",
		"":                            "no path",
	} {
		if err := Verify(path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Verify(%q) = %v, want one saying %q", path, err, want)
		}
	}
	if got := DefaultPath(); filepath.Base(got) != Binary {
		t.Errorf("DefaultPath() = %q, want %s next to the executable", got, Binary)
	}
}

// A runaway binary's output costs at most maxOutput here.
func TestOutputIsBounded(t *testing.T) {
	var b limitedBuffer
	chunk := strings.Repeat("x", 1000)
	for range 200 {
		if n, err := b.Write([]byte(chunk)); n != len(chunk) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	if b.Len() != maxOutput {
		t.Fatalf("kept %d bytes, want %d", b.Len(), maxOutput)
	}
}
