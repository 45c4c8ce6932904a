package localcluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// WithLock runs f while holding the machine-wide lock that serialises up and down.
func WithLock(c *Cluster, f func() error) error {
	if err := os.MkdirAll(filepath.Dir(GlobalLock), 0o755); err != nil {
		return err
	}
	l, err := os.OpenFile(GlobalLock, os.O_CREATE|os.O_RDWR, 0o644) // O_CLOEXEC: components do not inherit it
	if err != nil {
		return err
	}
	defer func() { _ = l.Close() }()
	if err := syscall.Flock(int(l.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		c.Logf("waiting for lock %s (held by another up or down)", GlobalLock)
		if err := syscall.Flock(int(l.Fd()), syscall.LOCK_EX); err != nil {
			return fmt.Errorf("lock %s: %w", GlobalLock, err)
		}
	}
	return f()
}

// otherOwner returns the state dir of another live cluster on this machine, if there is one.
func (c *Cluster) otherOwner() string {
	b, err := os.ReadFile(OwnerFile)
	if err != nil {
		return ""
	}
	o := strings.TrimSpace(string(b))
	if o == "" || o == c.State || len(cgroupPIDs(pidsCgroup())) == 0 {
		return ""
	}
	return o
}

// Down stops everything and undoes every host change; idempotent, and safe when nothing runs. The
// caller holds the lock (WithLock).
func (c *Cluster) Down(ctx context.Context) error {
	if o := c.otherOwner(); o != "" {
		c.Logf("WARNING: the running local cluster belongs to %s, not %s: leaving it (and the host's bridge, cgroups, DNAT) alone", o, c.State)
		return RunAll(ctx, c, ForeignTeardownSteps())
	}
	return RunAll(ctx, c, TeardownSteps())
}

// Up starts the cluster unless it runs already (then it only imports ExtraImages). The caller holds
// the lock and has built the binaries (hack/build-binaries.sh --cluster) and mkimage. A failed
// attempt is torn down and tried once more (a picked port can be taken before it is bound).
func (c *Cluster) Up(ctx context.Context) error {
	if err := preflight(); err != nil {
		return err
	}
	if c.Running() {
		c.Logf("cluster already running")
		if len(c.ExtraImages) > 0 {
			if err := c.loadEnv(); err != nil {
				return err
			}
			return c.importImages(ctx, c.ExtraImages)
		}
		return nil
	}
	if o := c.otherOwner(); o != "" {
		return fmt.Errorf("another local cluster is running on this machine (state %s); stop it first: ELECTOR_CACHE_DIR=%s hack/local-cluster.sh down", o, filepath.Dir(o))
	}
	c.Logf("cleaning up stale state (if any)")
	if err := c.Down(ctx); err != nil {
		c.Logf("WARNING: cleaning up stale state: %v (trying anyway)", err)
	}
	if err := c.PauseImage(ctx); err != nil {
		return fmt.Errorf("pause image: %w", err)
	}
	_ = os.RemoveAll(c.Logs)
	t0 := time.Now()
	for attempt := 1; ; attempt++ {
		err := RunSteps(ctx, c, StartSteps())
		if err == nil {
			c.Logf("cluster up in %v", time.Since(t0).Round(time.Second))
			return nil
		}
		if attempt == 2 && c.KeepOnFailure {
			return fmt.Errorf("%w; ELECTOR_KEEP_ON_FAILURE is set, so it stays as it is (logs: %s; clean up: hack/local-cluster.sh down)", err, c.Logs)
		}
		c.Logf("up attempt %d failed: %v: tearing down; logs kept in %s/attempt-%d", attempt, err, c.Logs, attempt)
		// The teardown always runs, also when ctx was cancelled (SIGTERM): hence a fresh context.
		derr := c.Down(context.WithoutCancel(ctx))
		c.keepLogs(attempt)
		if attempt == 2 || ctx.Err() != nil {
			return errors.Join(fmt.Errorf("up failed (logs in %s/attempt-*): %w", c.Logs, err), derr)
		}
	}
}

func preflight() error {
	if os.Geteuid() != 0 {
		return errors.New("the local cluster needs root (kubelet, containerd, CNI)")
	}
	if _, err := os.Stat(filepath.Join(CgroupRoot, "pids")); err != nil {
		return errors.New("the local cluster supports cgroup v1 hosts (with a pids hierarchy) only")
	}
	if _, err := os.Stat(filepath.Join(CgroupRoot, "cgroup.controllers")); err == nil {
		return errors.New("the local cluster supports cgroup v1 hosts only (this one has cgroup v2)")
	}
	return nil
}

func (c *Cluster) keepLogs(attempt int) {
	dir := filepath.Join(c.Logs, fmt.Sprintf("attempt-%d", attempt))
	_ = os.MkdirAll(dir, 0o755)
	logs, _ := filepath.Glob(filepath.Join(c.Logs, "*.log"))
	for _, l := range logs {
		_ = os.Rename(l, filepath.Join(dir, filepath.Base(l)))
	}
}

// Running reports whether every component runs (by its recorded PID and binary) and the node is Ready.
func (c *Cluster) Running() bool {
	for _, name := range startedComponents() {
		if _, ok := c.ours(name); !ok {
			return false
		}
	}
	if _, err := os.Stat(c.Kubeconfig); err != nil {
		return false
	}
	return c.nodeReady(context.Background()) == nil
}

// checkRunning fails (with the log tail) if a started component has exited.
func (c *Cluster) checkRunning() error {
	for _, name := range startedComponents() {
		pid := c.pidOf(name)
		if pid == 0 {
			continue
		}
		if !alive(pid) {
			return fmt.Errorf("%s (pid %d) exited; last lines of %s:\n%s", name, pid, c.logFile(name), tail(c.logFile(name), 30))
		}
	}
	return nil
}

// waitFor polls cond every second until it returns nil; it fails early if a component died.
func (c *Cluster) waitFor(ctx context.Context, what string, timeout time.Duration, cond func(ctx context.Context) error) error {
	t0 := time.Now()
	c.Logf("waiting for %s", what)
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := cond(cctx)
		cancel()
		if err == nil {
			c.Logf("%s: ok after %v", what, time.Since(t0).Round(time.Second))
			return nil
		}
		if rerr := c.checkRunning(); rerr != nil {
			return fmt.Errorf("a component died while waiting for %s: %w", what, rerr)
		}
		if time.Since(t0) >= timeout {
			return fmt.Errorf("timed out after %v waiting for %s (logs in %s): %w", timeout, what, c.Logs, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func (c *Cluster) kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, c.bin("kubectl"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

func waitEtcd(ctx context.Context, c *Cluster) error {
	url := fmt.Sprintf("http://127.0.0.1:%d/health", c.Ports.Etcd)
	return c.waitFor(ctx, "etcd", time.Minute, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	})
}

func waitAPIServer(ctx context.Context, c *Cluster) error {
	return c.waitFor(ctx, "kube-apiserver /readyz", 3*time.Minute, func(ctx context.Context) error {
		_, err := c.kubectl(ctx, "get", "--raw", "/readyz")
		return err
	})
}

func waitContainerd(ctx context.Context, c *Cluster) error {
	return c.waitFor(ctx, "containerd", time.Minute, func(ctx context.Context) error {
		return exec.CommandContext(ctx, c.bin("ctr"), "--address", c.ContainerdSock, "version").Run()
	})
}

func (c *Cluster) nodeReady(ctx context.Context) error {
	out, err := c.kubectl(ctx, "get", "node", NodeName, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	if err != nil {
		return err
	}
	if out != "True" {
		return fmt.Errorf("node %s Ready=%q", NodeName, out)
	}
	return nil
}

func waitNodeReady(ctx context.Context, c *Cluster) error {
	return c.waitFor(ctx, "node "+NodeName+" Ready", 3*time.Minute, c.nodeReady)
}

func waitServiceAccount(ctx context.Context, c *Cluster) error {
	return c.waitFor(ctx, "default ServiceAccount", 2*time.Minute, func(ctx context.Context) error {
		_, err := c.kubectl(ctx, "-n", "default", "get", "serviceaccount", "default")
		return err
	})
}

// importImages imports image tarballs (docker-archive or OCI layout) into containerd's k8s.io namespace.
func (c *Cluster) importImages(ctx context.Context, tars []string) error {
	if err := os.MkdirAll(c.Logs, 0o755); err != nil {
		return err
	}
	logPath := filepath.Join(c.Logs, "ctr-import.log")
	for _, t := range tars {
		if _, err := os.Stat(t); err != nil {
			return fmt.Errorf("image tarball %s does not exist", t)
		}
		c.Logf("importing image %s", t)
		out, err := exec.CommandContext(ctx, c.bin("ctr"), "--address", c.ContainerdSock, "--namespace", "k8s.io", "images", "import", t).CombinedOutput()
		if lf, ferr := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); ferr == nil {
			_, _ = lf.Write(out)
			_ = lf.Close()
		}
		if err != nil {
			return fmt.Errorf("importing %s: %w: %s", t, err, tail(logPath, 20))
		}
	}
	return nil
}

var pauseTagRE = regexp.MustCompile(`(?m)^TAG \?= *(\S+)`)

// PauseImage builds (once per Kubernetes version and tag) the pause image tarball from
// build/pause/linux/pause.c of the k8s.io/kubernetes module source (gcc -static, then mkimage), and
// sets PauseRef and PauseTar.
func (c *Cluster) PauseImage(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", "k8s.io/kubernetes@"+c.K8sVersion)
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false", "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go mod download k8s.io/kubernetes@%s: %w", c.K8sVersion, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return err
	}
	src := filepath.Join(mod.Dir, "build", "pause", "linux", "pause.c")
	mk, err := os.ReadFile(filepath.Join(mod.Dir, "build", "pause", "Makefile"))
	if err != nil {
		return err
	}
	m := pauseTagRE.FindSubmatch(mk)
	if m == nil {
		return fmt.Errorf("cannot read the pause TAG from %s/build/pause/Makefile", mod.Dir)
	}
	tag := string(m[1])
	c.PauseRef = "registry.k8s.io/pause:" + tag
	c.PauseTar = filepath.Join(c.Images, "pause-"+tag+".tar")
	stamp := c.K8sVersion + " " + tag + " mkimage"
	if b, err := os.ReadFile(c.PauseTar + ".stamp"); err == nil && strings.TrimSpace(string(b)) == stamp {
		if _, err := os.Stat(c.PauseTar); err == nil {
			return nil
		}
	}
	c.Logf("building the pause image %s from %s", c.PauseRef, src)
	if err := os.MkdirAll(c.Images, 0o755); err != nil {
		return err
	}
	bin := filepath.Join(c.Images, "pause.bin")
	if out, err := exec.CommandContext(ctx, "gcc", "-Os", "-Wall", "-static", "-DVERSION=v"+tag+"-elector", "-o", bin, src).CombinedOutput(); err != nil {
		return fmt.Errorf("gcc pause.c (hack/install-deps.sh cluster installs gcc): %w: %s", err, out)
	}
	if out, err := exec.CommandContext(ctx, c.bin("mkimage"), "--out", c.PauseTar, "--tag", c.PauseRef,
		"--file", bin+":/pause", "--entrypoint", "/pause", "--user", "65535:65535").CombinedOutput(); err != nil {
		return fmt.Errorf("mkimage: %w: %s", err, out)
	}
	return os.WriteFile(c.PauseTar+".stamp", []byte(stamp+"\n"), 0o644)
}

// loadEnv reads the node IP, ports, socket and pause image of the running cluster from its env file.
func (c *Cluster) loadEnv() error {
	f, err := os.Open(c.EnvFile)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, _ := strings.Cut(s.Text(), "=")
		switch k {
		case "ELECTOR_CLUSTER_CONTAINERD_SOCK":
			c.ContainerdSock = v
		case "ELECTOR_CLUSTER_NODE_IP":
			c.NodeIP = v
		case "ELECTOR_CLUSTER_PAUSE_IMAGE":
			c.PauseRef = v
		}
	}
	return s.Err()
}

// WriteEnv writes the `env` command's output: KUBECONFIG, PATH, and the running cluster's
// ELECTOR_CLUSTER_* variables, as export lines for eval.
func (c *Cluster) WriteEnv(w io.Writer) error {
	fmt.Fprintf(w, "export KUBECONFIG=%s\n", c.Kubeconfig)
	fmt.Fprintf(w, "export PATH=%s:$PATH\n", c.Bin)
	b, err := os.ReadFile(c.EnvFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if line != "" && !strings.HasPrefix(line, "KUBECONFIG=") {
			fmt.Fprintf(w, "export %s\n", line)
		}
	}
	return nil
}

// Status prints each component's PID, the env file and the node; it returns an error if the
// cluster is not (entirely) running.
func (c *Cluster) Status(ctx context.Context, w io.Writer) error {
	var down []string
	for _, name := range startedComponents() {
		if pid, ok := c.ours(name); ok {
			fmt.Fprintf(w, "%-24s running (pid %d)\n", name, pid)
		} else {
			fmt.Fprintf(w, "%-24s not running\n", name)
			down = append(down, name)
		}
	}
	if b, err := os.ReadFile(c.EnvFile); err == nil {
		for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
			fmt.Fprintf(w, "  %s\n", line)
		}
	}
	if len(down) > 0 {
		return fmt.Errorf("not running: %s", strings.Join(down, ", "))
	}
	out, err := c.kubectl(ctx, "get", "nodes", "-o", "wide")
	if err != nil {
		return err
	}
	fmt.Fprintln(w, out)
	return nil
}

// UsageHint is printed after a successful up.
func (c *Cluster) UsageHint(w io.Writer) {
	fmt.Fprintf(w, `
Cluster is up (node %s). Use it with:
  export KUBECONFIG=%s
  export PATH=%s:$PATH
  kubectl get nodes
or: eval "$(hack/local-cluster.sh env)". Logs: %s. Stop with: hack/local-cluster.sh down
`, NodeName, c.Kubeconfig, c.Bin, c.Logs)
}
