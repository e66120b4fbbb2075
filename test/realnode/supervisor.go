package realnode

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"nodeconfig.io/test/proc"
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

// Release lets a held process start again.
func (s *Supervisor) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held != nil {
		close(s.held)
		s.held = nil
	}
}

// RestartDelay is systemd's RestartSec in kubeadm's kubelet unit.
const RestartDelay = time.Second

// Supervise starts p's binary and keeps it running until Stop.
func Supervise(name, path string, args []string, logPath, pidFile string) (*Supervisor, error) {
	p, err := proc.Start(name, path, args, logPath)
	if err != nil {
		return nil, err
	}
	s := &Supervisor{Process: p, PidFile: pidFile, starts: 1, done: make(chan struct{})}
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
		time.Sleep(RestartDelay)
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
	s.stopping = true
	s.mu.Unlock()
	s.Release()
	err := s.Process.Stop(grace)
	<-s.done
	_ = os.Remove(s.PidFile)
	return err
}
