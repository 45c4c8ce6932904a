//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// hostPID finds the host PID of a container's main process by scanning
// /proc for processes whose cgroup path names the container ID and whose
// argv[0] is exe (exec'd probe processes, `exe probe ...`, are skipped).
// This works where the test runs on the node itself (the local cluster) or
// on a Linux host whose containers it can see (kind), with enough privileges.
func hostPID(containerID, exe string) (int, error) {
	if containerID == "" {
		return 0, fmt.Errorf("container has no ID yet")
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var found []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil || !bytes.Contains(cg, []byte(containerID)) {
			continue
		}
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		argv := strings.Split(strings.TrimRight(string(cmd), "\x00"), "\x00")
		if argv[0] != exe || (len(argv) > 1 && argv[1] == "probe") {
			continue
		}
		found = append(found, pid)
	}
	switch len(found) {
	case 0:
		return 0, fmt.Errorf("no process %s in container %.12s visible in /proc (not on the node, or not root?)", exe, containerID)
	case 1:
		return found[0], nil
	default:
		return 0, fmt.Errorf("several processes %s in container %.12s: %v", exe, containerID, found)
	}
}

// procState: the state letter of /proc/PID/stat (R, S, T for stopped, ...).
func procState(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	// pid (comm) state ...; comm may contain spaces and parentheses: cut at the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return "", fmt.Errorf("unexpected /proc/%d/stat: %q", pid, s)
	}
	return s[i+2 : i+3], nil
}

// hostLog is a container's CRI log file on this host, opened through the
// kubelet's /var/log/containers/<pod>_<namespace>_<container>-<id>.log
// symlink while the container runs. The open file stays readable after the
// kubelet removes the dead container and its log, so it has every line the
// container wrote, unlike a followed log stream (the kubelet can end that
// stream before sending the lines written just before the exit).
type hostLog struct{ f *os.File }

func openHostLog(namespace, pod, container, containerID string) (*hostLog, error) {
	f, err := os.Open(fmt.Sprintf("/var/log/containers/%s_%s_%s-%s.log", pod, namespace, container, containerID))
	if err != nil {
		return nil, err
	}
	return &hostLog{f: f}, nil
}

// lines reads the whole file: CRI lines "<RFC3339Nano> <stream> <P|F> <text>".
func (h *hostLog) lines() ([]logLine, error) {
	if _, err := h.f.Seek(0, 0); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(h.f)
	if err != nil {
		return nil, err
	}
	var out []logLine
	partial := ""
	for _, l := range strings.Split(string(b), "\n") {
		fs := strings.SplitN(l, " ", 4)
		if len(fs) < 3 {
			continue
		}
		ts, err := time.Parse(time.RFC3339Nano, fs[0])
		if err != nil {
			continue
		}
		text := ""
		if len(fs) == 4 {
			text = fs[3]
		}
		if fs[2] == "P" {
			partial += text
			continue
		}
		out = append(out, logLine{ts: ts, text: partial + text})
		partial = ""
	}
	return out, nil
}

func (h *hostLog) Close() error { return h.f.Close() }
