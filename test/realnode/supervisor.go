package realnode

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"nodeconfig.io/test/framework/proc"
)

// Supervisor restarts its process whenever it exits, one second later, as
// systemd's Restart=always does for the kubelet kubeadm installs; the pid of
// the current run is in PidFile.
type Supervisor struct {
	*proc.Process
	PidFile string

	mu       sync.Mutex
	stopping bool
	held     chan struct{} // non-nil: restarts wait until it is closed
	starts   int
	done     chan struct{}
	// stop ends the wait between two runs.
	stop chan struct{}
	// unitDir holds the unit's drop-ins, whose ExecStartPre= lines run
	// before each start.
	unitDir     string
	preStartLog string
}

// runPreStart runs the drop-ins' ExecStartPre= commands in turn, their
// output appended to preStartLog. One whose failure is not ignored ('-')
// is logged there: this supervisor starts the process anyway, where systemd
// would not, so that a test sees the failure in the log rather than a node
// that never starts.
func (s *Supervisor) runPreStart() {
	if s.unitDir == "" {
		return
	}
	cmds, err := execStartPre(s.unitDir)
	if len(cmds) == 0 && err == nil {
		return
	}
	log, lerr := os.OpenFile(s.preStartLog, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if lerr != nil {
		fmt.Fprintf(os.Stderr, "supervisor: pre-start log: %v\n", lerr)
		return
	}
	defer log.Close()
	if err != nil {
		fmt.Fprintf(log, "supervisor: read the drop-ins: %v\n", err)
	}
	for _, c := range cmds {
		cmd := exec.Command(c.argv[0], c.argv[1:]...)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(log, "supervisor: ExecStartPre=%s: %v (ignored: %v)\n", strings.Join(c.argv, " "), err, c.ignoreFailure)
		}
	}
}

// preStartCommand is one ExecStartPre= line.
type preStartCommand struct {
	argv          []string
	ignoreFailure bool
}

// execStartPre reads the ExecStartPre= lines of dir's *.conf files, in the
// order systemd applies them (by file name). Arguments are split at blanks:
// the lines this harness meets quote nothing.
func execStartPre(dir string) ([]preStartCommand, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.conf"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []preStartCommand
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return out, err
		}
		for _, line := range strings.Split(string(b), "\n") {
			v, ok := strings.CutPrefix(strings.TrimSpace(line), "ExecStartPre=")
			if !ok {
				continue
			}
			c := preStartCommand{}
			v, c.ignoreFailure = strings.CutPrefix(v, "-")
			if c.argv = strings.Fields(v); len(c.argv) > 0 {
				out = append(out, c)
			}
		}
	}
	return out, nil
}

// Hold keeps the process down after its next exit until Release, as a slow
// babysitter would: a test's way to act while the consumer is down.
func (s *Supervisor) Hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held == nil {
		s.held = make(chan struct{})
	}
}

// SetArgs gives the process other arguments from its next start on, as an
// edit of a unit's command line does until the unit restarts.
func (s *Supervisor) SetArgs(args []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Process.Args = args
}

// Release lets a held process start again.
func (s *Supervisor) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held != nil {
		close(s.held)
		s.held = nil
	}
}

// RestartDelay is systemd's RestartSec in kubeadm's kubelet unit: a shorter
// one would hide from the agent's gate the outages it must survive.
const RestartDelay = 10 * time.Second

// Supervise starts p, a process not yet started, and keeps it running
// until Stop. Before each start it runs the ExecStartPre= lines of the
// *.conf drop-ins in unitDir (empty: none), as systemd does for a unit:
// their output goes to preStartLog, and with the '-' prefix their failure
// never holds the start.
func Supervise(p *proc.Process, pidFile, unitDir, preStartLog string) (*Supervisor, error) {
	s := &Supervisor{PidFile: pidFile, starts: 1, done: make(chan struct{}), stop: make(chan struct{}), unitDir: unitDir, preStartLog: preStartLog}
	s.runPreStart()
	if err := p.Restart(); err != nil {
		return nil, err
	}
	s.Process = p
	if err := s.writePid(); err != nil {
		return nil, err
	}
	go s.loop()
	return s, nil
}

func (s *Supervisor) loop() {
	defer close(s.done)
	for {
		<-s.Process.Done()
		s.mu.Lock()
		stopping := s.stopping
		s.mu.Unlock()
		if stopping {
			return
		}
		select {
		case <-time.After(RestartDelay):
		case <-s.stop:
			return
		}
		s.mu.Lock()
		held := s.held
		s.mu.Unlock()
		if held != nil {
			<-held
		}
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			return
		}
		s.runPreStart()
		err := s.Process.Restart()
		if err == nil {
			s.starts++
			err = s.writePid()
		}
		s.mu.Unlock()
		if err != nil {
			fmt.Fprintf(os.Stderr, "supervisor: restart %s: %v\n", s.Name, err)
		}
	}
}

func (s *Supervisor) writePid() error {
	return os.WriteFile(s.PidFile, []byte(strconv.Itoa(s.Process.Pid())+"\n"), 0o644)
}

// Starts counts how often the process was started.
func (s *Supervisor) Starts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts
}

// Stop stops restarting and stops the process.
func (s *Supervisor) Stop(grace time.Duration) error {
	s.mu.Lock()
	if !s.stopping {
		close(s.stop)
	}
	s.stopping = true
	s.mu.Unlock()
	s.Release()
	err := s.Process.Stop(grace)
	<-s.done
	_ = os.Remove(s.PidFile)
	return err
}
