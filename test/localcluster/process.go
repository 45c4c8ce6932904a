package localcluster

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Components run detached: `up` returns while they keep running, so they are not started with
// test/framework's StartProcess (whose children get SIGKILL when their parent exits). Each one is
// recorded as Run/NAME.pid plus Run/NAME.exe (the binary that PID must run), which guards every
// signal against PID reuse.

// CgExecCommand is the hidden subcommand of test/cmd/localcluster that joins a cgroup and execs a
// binary: `localcluster cgexec CGROUP_DIR BIN ARGS...`. The started PID is then the component's.
const CgExecCommand = "cgexec"

// CgExec joins the v1 cgroup dir (writes its own PID to cgroup.procs) and replaces itself with bin.
// Every process the component starts (containerd's shims) inherits the cgroup.
func CgExec(args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("usage: %s CGROUP_DIR BIN [ARGS...]", CgExecCommand)
	}
	closeInheritedFDs()
	if err := os.WriteFile(filepath.Join(args[0], "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return fmt.Errorf("join cgroup %s: %w", args[0], err)
	}
	return syscall.Exec(args[1], args[1:], os.Environ())
}

func (c *Cluster) pidFile(name string) string { return filepath.Join(c.Run, name+".pid") }
func (c *Cluster) exeFile(name string) string { return filepath.Join(c.Run, name+".exe") }
func (c *Cluster) logFile(name string) string { return filepath.Join(c.Logs, name+".log") }

// closeInheritedFDs marks every file descriptor above stderr close-on-exec. Descriptors this
// process inherited (a caller's `flock FILE cmd` lock, a pipe) would otherwise pass to components
// that outlive it, and e.g. hold the caller's lock for as long as the cluster runs.
func closeInheritedFDs() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

// startDetached starts bin as component name: own session, stdin /dev/null, output to Logs/name.log,
// inside the cluster's pids cgroup; records its PID and binary.
func (c *Cluster) startDetached(name, bin string, args ...string) error {
	for _, d := range []string{c.Run, c.Logs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	exe, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	logf, err := os.OpenFile(c.logFile(name), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer func() { _ = logf.Close() }()
	closeInheritedFDs()
	// /proc/self/exe: this very binary, even if hack/local-cluster.sh rebuilt it meanwhile.
	cmd := exec.Command("/proc/self/exe", append([]string{CgExecCommand, pidsCgroup(), bin}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf // stdin: /dev/null
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := os.WriteFile(c.exeFile(name), []byte(exe+"\n"), 0o644); err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	go func() { _ = cmd.Wait() }() // reap it if it dies while this process still runs
	if err := os.WriteFile(c.pidFile(name), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		return err
	}
	c.Logf("started %s (pid %d, log %s)", name, cmd.Process.Pid, c.logFile(name))
	return nil
}

// pidOf returns the recorded PID of component name (0 if none).
func (c *Cluster) pidOf(name string) int {
	b, err := os.ReadFile(c.pidFile(name))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// alive reports whether pid runs (and is not a zombie).
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	return procState(string(b)) != "" && procState(string(b)) != "Z" && procState(string(b)) != "X"
}

// procState returns the state field of a /proc/PID/stat line (the comm field may contain spaces and
// parentheses, so it is read after the last ')').
func procState(stat string) string {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(stat[i+1:])
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// ours reports whether the recorded PID of component name is alive and runs the recorded binary
// (not some other process that got the PID after ours exited).
func (c *Cluster) ours(name string) (int, bool) {
	pid := c.pidOf(name)
	if !alive(pid) {
		return pid, false
	}
	want, err := os.ReadFile(c.exeFile(name))
	if err != nil {
		return pid, false
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return pid, false
	}
	return pid, strings.TrimSuffix(exe, " (deleted)") == strings.TrimSpace(string(want))
}

// stopPID sends SIGTERM, waits up to timeout, then SIGKILL (and waits up to 5 s more).
func (c *Cluster) stopPID(name string, pid int, timeout time.Duration) error {
	if !alive(pid) {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return nil // gone meanwhile
	}
	if waitGone(pid, timeout) {
		return nil
	}
	c.Logf("%s (pid %d) did not stop within %v, sending SIGKILL", name, pid, timeout)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	if waitGone(pid, 5*time.Second) {
		return nil
	}
	return fmt.Errorf("%s (pid %d) still alive after SIGKILL", name, pid)
}

func waitGone(pid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for alive(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

// stopComponent stops component name by its recorded PID if that PID is still ours.
func (c *Cluster) stopComponent(name string) error {
	pid, ok := c.ours(name)
	if !ok {
		return nil
	}
	c.Logf("stopping %s (pid %d)", name, pid)
	return c.stopPID(name, pid, 15*time.Second)
}

// cgroupPIDs returns every PID in the v1 cgroup tree dir (none if it does not exist).
func cgroupPIDs(dir string) []int {
	var pids []int
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return nil
		}
		defer func() { _ = f.Close() }()
		s := bufio.NewScanner(f)
		for s.Scan() {
			if pid, err := strconv.Atoi(strings.TrimSpace(s.Text())); err == nil && pid != os.Getpid() {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// killCgroup sends SIGKILL to every process in the v1 cgroup tree dir until it is empty (about 10 s
// at most).
func (c *Cluster) killCgroup(what, dir string) error {
	if n := len(cgroupPIDs(dir)); n > 0 {
		c.Logf("killing %d %s", n, what)
	}
	for range 100 {
		pids := cgroupPIDs(dir)
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if left := cgroupPIDs(dir); len(left) > 0 {
		return fmt.Errorf("processes left in %s: %v", dir, left)
	}
	return nil
}

// tail returns the last n lines of file (for failure messages).
func tail(file string, n int) string {
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return "(no log)"
	} else if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
