package framework

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// ProcessSpec describes a child process.
type ProcessSpec struct {
	// Name labels the process in errors and names its log file.
	Name string
	Path string
	Args []string
	// Env is added to the test process's environment (later entries win).
	Env []string
	// LogDir receives Name.log with the process's stdout and stderr. Empty: a temporary directory.
	LogDir string
	// Output, if set, also receives stdout and stderr (e.g. a live timeline).
	Output io.Writer
	// NewProcessGroup puts the child in its own process group, so a terminal's
	// Ctrl-C reaches only the parent, which then stops the child itself.
	NewProcessGroup bool
}

// Process is a running (or exited) child process. The child gets SIGKILL if
// the parent dies (Linux parent-death signal), so nothing outlives a crashed test.
type Process struct {
	Spec    ProcessSpec
	LogPath string

	cmd     *exec.Cmd
	logFile *os.File
	done    chan struct{}
	started time.Time

	mu       sync.Mutex
	exitCode int
	waitErr  error
	exitedAt time.Time
}

// StartProcess starts spec and returns at once.
func StartProcess(spec ProcessSpec) (*Process, error) {
	if spec.LogDir == "" {
		d, err := os.MkdirTemp("", "elector-logs-")
		if err != nil {
			return nil, fmt.Errorf("start %s: %w", spec.Name, err)
		}
		spec.LogDir = d
	}
	if err := os.MkdirAll(spec.LogDir, 0o755); err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.Name, err)
	}
	logPath := filepath.Join(spec.LogDir, sanitize(spec.Name)+".log")
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.Name, err)
	}
	var out io.Writer = lf
	if spec.Output != nil {
		out = io.MultiWriter(lf, spec.Output)
	}
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Env = append(os.Environ(), spec.Env...)
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: spec.NewProcessGroup}
	if err := cmd.Start(); err != nil {
		_ = lf.Close()
		return nil, fmt.Errorf("start %s (%s): %w", spec.Name, spec.Path, err)
	}
	p := &Process{Spec: spec, LogPath: logPath, cmd: cmd, logFile: lf, done: make(chan struct{}), started: time.Now()}
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.exitedAt = time.Now()
		p.waitErr = err
		p.exitCode = 0
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				p.exitCode = ee.ExitCode() // -1 if killed by a signal
			} else {
				p.exitCode = -1
			}
		}
		p.mu.Unlock()
		_ = lf.Close()
		close(p.done)
	}()
	return p, nil
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[i] = '_'
		}
	}
	return string(b)
}

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ExitCode returns the exit code once exited (-1 if killed by a signal) and
// whether the process has exited.
func (p *Process) ExitCode() (int, bool) {
	if !p.Exited() {
		return 0, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitCode, true
}

// ExitedAt returns when the harness saw the process exit (zero if running).
func (p *Process) ExitedAt() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitedAt
}

// Signal sends sig to the process (no-op error if it already exited).
func (p *Process) Signal(sig syscall.Signal) error {
	if p.Exited() {
		return fmt.Errorf("signal %v to %s: process already exited", sig, p.Spec.Name)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %v to %s: %w", sig, p.Spec.Name, err)
	}
	return nil
}

// Kill sends SIGKILL.
func (p *Process) Kill() error { return p.Signal(syscall.SIGKILL) }

// Terminate sends SIGTERM.
func (p *Process) Terminate() error { return p.Signal(syscall.SIGTERM) }

// Pause sends SIGSTOP.
func (p *Process) Pause() error { return p.Signal(syscall.SIGSTOP) }

// Resume sends SIGCONT.
func (p *Process) Resume() error { return p.Signal(syscall.SIGCONT) }

// Wait waits up to timeout for the process to exit and returns its exit code.
func (p *Process) Wait(timeout time.Duration) (int, error) {
	select {
	case <-p.done:
		code, _ := p.ExitCode()
		return code, nil
	case <-time.After(timeout):
		return 0, fmt.Errorf("%s (pid %d) still running after %v", p.Spec.Name, p.Pid(), timeout)
	}
}

// Stop makes sure the process is gone: SIGCONT (in case it is paused), SIGTERM,
// then SIGKILL after grace. It returns the exit code.
func (p *Process) Stop(grace time.Duration) int {
	if !p.Exited() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		if _, err := p.Wait(grace); err != nil {
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
		}
	}
	code, _ := p.ExitCode()
	return code
}

// Logs returns what the process wrote so far.
func (p *Process) Logs() string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", p.LogPath, err)
	}
	return string(b)
}

// LogTail returns the last n lines the process wrote.
func (p *Process) LogTail(n int) string {
	return tailLines(p.Logs(), n)
}

func tailLines(s string, n int) string {
	count := 0
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '\n' && i != len(s)-1 {
			count++
			if count == n {
				return s[i+1:]
			}
		}
	}
	return s
}
