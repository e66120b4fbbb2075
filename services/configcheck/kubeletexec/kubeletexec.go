// Package kubeletexec runs the kubelet validator in a short-lived child
// process, nodeconfig-kubelet-check, for a caller that must not link the
// kubelet's code: its package inits and binary pages would cost every
// reconciler replica resident memory for a check that runs once per new
// version. This package imports none of it.
//
// The binary reads one drop-in on stdin and answers with its exit code:
// ExitValid, or ExitInvalid with the kubelet's words on stdout. Any other
// end (another code, a signal, no answer within the timeout, no binary)
// is no verdict: Check returns a *configcheck.UnavailableError.
package kubeletexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"nodeconfig.io/services/configcheck"
)

// Binary is the validator's file name, as make build and the reconciler's
// image install it: next to the reconciler.
const Binary = "nodeconfig-kubelet-check"

// The binary's exit codes.
const (
	ExitValid   = 0
	ExitInvalid = 1
	// ExitCannotJudge: the binary could not read or judge its input; any
	// code but ExitValid and ExitInvalid means the same.
	ExitCannotJudge = 2
)

// DefaultTimeout bounds one run. A run takes a fraction of a second; the
// bound is for a binary that hangs, or a host so loaded that an answer
// later is as good as none.
const DefaultTimeout = 30 * time.Second

// maxOutput bounds what is kept of the binary's stdout and stderr.
const maxOutput = 64 << 10

// Runner runs the binary at Path.
type Runner struct {
	Path string
	// Timeout bounds one run (0: DefaultTimeout).
	Timeout time.Duration
}

// DefaultPath is Binary in the directory of the running executable; "" if
// that directory cannot be known.
func DefaultPath() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return filepath.Join(filepath.Dir(exe), Binary)
}

// Verify says whether path is an executable file; its error says what to
// do instead.
func Verify(path string) error {
	if path == "" {
		return fmt.Errorf("no path for the kubelet validator %s", Binary)
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("the kubelet validator %s does not exist", path)
	case err != nil:
		return fmt.Errorf("the kubelet validator: %w", err)
	case !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("the kubelet validator %s is not an executable file (%v)", path, fi.Mode())
	}
	return nil
}

// Check judges a drop-in in the child process: nil when valid, the
// kubelet's words when invalid, a *configcheck.UnavailableError when the
// binary gave no verdict. It is a configcheck.Checker's Kubelet.
func (r Runner) Check(ctx context.Context, data []byte) error {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	run, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var stdout, stderr limitedBuffer
	cmd := exec.CommandContext(run, r.Path)
	cmd.Stdin = bytes.NewReader(data)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// The binary has no children; this only bounds the wait for its pipes
	// once it is killed.
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		// The caller gave up; the binary was killed.
		return r.unavailable(fmt.Errorf("stopped: %w", ctx.Err()))
	case run.Err() != nil:
		return r.unavailable(fmt.Errorf("no answer within %s (killed)", timeout))
	case errors.As(err, &exit) && exit.ExitCode() == ExitInvalid:
		msg := strings.TrimSuffix(stdout.String(), "\n")
		if msg == "" {
			return r.unavailable(fmt.Errorf("exit status %d without a reason on stdout%s", ExitInvalid, summary(stderr.String())))
		}
		return errors.New(msg)
	case errors.As(err, &exit):
		return r.unavailable(fmt.Errorf("%v%s", exit, summary(stderr.String())))
	default:
		// It did not start: missing, not executable, no memory to fork.
		return r.unavailable(err)
	}
}

func (r Runner) unavailable(err error) error {
	if !strings.Contains(err.Error(), r.Path) {
		err = fmt.Errorf("%s: %w", r.Path, err)
	}
	return &configcheck.UnavailableError{Validator: "kubelet", Err: err}
}

// summary is the line of a crashed binary's stderr that says why: a Go
// panic or fatal error, else its last line. The stack after it would make
// every failure's message differ.
func summary(stderr string) string {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	pick := ""
	for _, l := range lines {
		if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") {
			pick = l
			break
		}
	}
	if pick == "" {
		pick = lines[len(lines)-1]
	}
	if pick = strings.TrimSpace(pick); pick == "" {
		return ""
	}
	if len(pick) > 300 {
		pick = pick[:300] + "..."
	}
	return ": " + pick
}

// limitedBuffer keeps the first maxOutput bytes written to it and drops
// the rest, so a runaway binary costs no memory here.
type limitedBuffer struct{ bytes.Buffer }

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := maxOutput - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
