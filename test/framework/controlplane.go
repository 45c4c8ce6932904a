package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// ControlPlaneOptions configures StartControlPlane.
type ControlPlaneOptions struct {
	// AssetsDir holds etcd, kube-apiserver and kubectl. Empty: AssetsDir().
	AssetsDir string
	// Dir holds certificates, etcd data, the kubeconfig and the logs. Empty: a
	// new temporary directory, removed by Stop.
	Dir string
	// StartTimeout bounds starting etcd and the apiserver (default 90s: the
	// machine may be loaded).
	StartTimeout time.Duration
}

// ControlPlane is a running etcd + kube-apiserver. The apiserver can be
// stopped and started again (same port, certificates and etcd), so clients
// holding Kubeconfig reconnect by themselves.
type ControlPlane struct {
	Env *envtest.Environment
	// Config is an admin (system:masters) client config.
	Config *rest.Config
	Client kubernetes.Interface
	// Kubeconfig is the path of an admin kubeconfig file for child processes and kubectl.
	Kubeconfig string
	AssetsDir  string
	Dir        string
	// APIServerLog is the path of the apiserver's log.
	APIServerLog string

	ownDir  bool
	logFile *os.File

	mu           sync.Mutex
	apiserverUp  bool
	stoppedAt    time.Time
	restartCount int
}

// StartControlPlane starts etcd and kube-apiserver and waits until the
// apiserver serves the default namespace.
func StartControlPlane(opts ControlPlaneOptions) (*ControlPlane, error) {
	// controller-runtime warns after 30s if no logger was set.
	ctrllog.SetLogger(logr.Discard())

	assets := opts.AssetsDir
	if assets == "" {
		var err error
		if assets, err = AssetsDir(); err != nil {
			return nil, err
		}
	}
	cp := &ControlPlane{AssetsDir: assets, Dir: opts.Dir}
	if cp.Dir == "" {
		d, err := os.MkdirTemp("", "elector-controlplane-")
		if err != nil {
			return nil, fmt.Errorf("control plane: %w", err)
		}
		cp.Dir, cp.ownDir = d, true
	}
	certDir := filepath.Join(cp.Dir, "apiserver")
	etcdDir := filepath.Join(cp.Dir, "etcd")
	for _, d := range []string{certDir, etcdDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("control plane: %w", err)
		}
	}
	cp.APIServerLog = filepath.Join(cp.Dir, "kube-apiserver.log")
	lf, err := os.OpenFile(cp.APIServerLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("control plane: %w", err)
	}
	cp.logFile = lf
	etcdLog, err := os.OpenFile(filepath.Join(cp.Dir, "etcd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("control plane: %w", err)
	}

	timeout := opts.StartTimeout
	if timeout == 0 {
		timeout = 90 * time.Second
	}
	// A fixed CertDir (not a temporary one envtest would delete on Stop) keeps
	// the serving certificates, the port and the client CA across an apiserver
	// restart.
	apiserver := &envtest.APIServer{
		CertDir: certDir,
		Path:    orphanSafe(cp.Dir, filepath.Join(assets, "kube-apiserver")),
		Out:     lf,
		Err:     lf,
	}
	etcd := &envtest.Etcd{
		DataDir: etcdDir,
		Path:    orphanSafe(cp.Dir, filepath.Join(assets, "etcd")),
		Out:     etcdLog,
		Err:     etcdLog,
	}
	cp.Env = &envtest.Environment{
		ControlPlane:             envtest.ControlPlane{APIServer: apiserver, Etcd: etcd, KubectlPath: filepath.Join(assets, "kubectl")},
		BinaryAssetsDirectory:    assets,
		ControlPlaneStartTimeout: timeout,
		ControlPlaneStopTimeout:  10 * time.Second,
	}
	cfg, err := cp.Env.Start()
	if err != nil {
		_ = cp.Env.Stop()
		return nil, fmt.Errorf("start control plane (etcd + kube-apiserver from %s; apiserver log %s): %w", assets, cp.APIServerLog, err)
	}
	cp.Config = cfg
	cp.apiserverUp = true
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		_ = cp.Stop()
		return nil, fmt.Errorf("control plane client: %w", err)
	}
	cp.Client = cs
	cp.Kubeconfig = filepath.Join(cp.Dir, "admin.kubeconfig")
	if err := os.WriteFile(cp.Kubeconfig, cp.Env.KubeConfig, 0o600); err != nil {
		_ = cp.Stop()
		return nil, fmt.Errorf("write kubeconfig: %w", err)
	}
	return cp, nil
}

// orphanSafe returns a wrapper script that execs bin with the parent-death
// signal set (util-linux setpriv), so etcd and the apiserver die with the
// process that started them even if it crashes; bin itself if setpriv is missing.
func orphanSafe(dir, bin string) string {
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		return bin
	}
	wdir := filepath.Join(dir, "wrappers")
	if err := os.MkdirAll(wdir, 0o755); err != nil {
		return bin
	}
	w := filepath.Join(wdir, filepath.Base(bin))
	script := fmt.Sprintf("#!/bin/sh\nexec %s --pdeathsig KILL -- %s \"$@\"\n", setpriv, bin)
	if err := os.WriteFile(w, []byte(script), 0o755); err != nil {
		return bin
	}
	return w
}

// APIServerURL returns the apiserver's https URL.
func (cp *ControlPlane) APIServerURL() string { return cp.Config.Host }

// DefaultAPIServerStopGrace is how long StopAPIServer waits after SIGTERM
// before it kills the apiserver (a graceful kube-apiserver shutdown can take
// tens of seconds while it drains watches).
const DefaultAPIServerStopGrace = 5 * time.Second

// StopAPIServer stops kube-apiserver (etcd keeps running): SIGTERM, then
// SIGKILL after grace (0: DefaultAPIServerStopGrace). It returns once the
// process has exited, so no request can succeed after it returns.
func (cp *ControlPlane) StopAPIServer(grace time.Duration) error {
	if grace <= 0 {
		grace = DefaultAPIServerStopGrace
	}
	return cp.stopAPIServer(syscall.SIGTERM, grace)
}

// KillAPIServer kills kube-apiserver with SIGKILL (a crash) and returns once
// it has exited.
func (cp *ControlPlane) KillAPIServer() error {
	return cp.stopAPIServer(syscall.SIGKILL, 0)
}

func (cp *ControlPlane) stopAPIServer(sig syscall.Signal, grace time.Duration) error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if !cp.apiserverUp {
		return nil
	}
	// Whatever happens below, the next StartAPIServer must really start one.
	cp.apiserverUp = false
	cp.stoppedAt = time.Now()
	pid, err := cp.apiserverPid()
	if err != nil {
		return err
	}
	_ = syscall.Kill(pid, sig)
	if !waitGone(pid, grace) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		if !waitGone(pid, 10*time.Second) {
			return fmt.Errorf("stop kube-apiserver: pid %d still running after SIGKILL", pid)
		}
	}
	// Let envtest notice the exit and clean its state up (best effort, as before: up to a second).
	_ = Poll(context.Background(), 20*time.Millisecond, time.Second, func(context.Context) (bool, error) {
		return cp.Env.ControlPlane.APIServer.Stop() == nil, nil
	})
	cp.stoppedAt = time.Now()
	return nil
}

// apiserverPid finds the kube-apiserver process of this control plane (the
// one whose command line names its certificate directory).
func (cp *ControlPlane) apiserverPid() (int, error) {
	certDir := cp.Env.ControlPlane.APIServer.CertDir
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("find kube-apiserver: %w", err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 0 && filepath.Base(args[0]) == "kube-apiserver" && strings.Contains(string(b), certDir) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("find kube-apiserver: no process with --cert-dir %s", certDir)
}

// waitGone waits up to timeout for pid to be gone (reaped, or a zombie).
func waitGone(pid int, timeout time.Duration) bool {
	return Poll(context.Background(), 10*time.Millisecond, timeout, func(context.Context) (bool, error) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true, nil
		}
		// field 3 is the state; Z = zombie (exited, not yet reaped)
		i := strings.LastIndexByte(string(b), ')')
		return i >= 0 && len(b) > i+2 && b[i+2] == 'Z', nil
	}) == nil
}

// StoppedAt returns when the apiserver was last seen to have exited.
func (cp *ControlPlane) StoppedAt() time.Time {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.stoppedAt
}

// StartAPIServer starts kube-apiserver again after StopAPIServer, on the same
// port with the same certificates, and waits until it is healthy.
func (cp *ControlPlane) StartAPIServer() error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.apiserverUp {
		return nil
	}
	if err := cp.Env.ControlPlane.APIServer.Start(); err != nil {
		return fmt.Errorf("restart kube-apiserver (log %s): %w", cp.APIServerLog, err)
	}
	cp.apiserverUp = true
	cp.restartCount++
	return nil
}

// APIServerUp reports whether the apiserver is running (as far as the harness knows).
func (cp *ControlPlane) APIServerUp() bool {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.apiserverUp
}

// Stop stops the apiserver and etcd and removes the working directory if
// StartControlPlane created it.
func (cp *ControlPlane) Stop() error {
	err := cp.Env.Stop()
	if cp.logFile != nil {
		_ = cp.logFile.Close()
	}
	if cp.ownDir {
		_ = os.RemoveAll(cp.Dir)
	}
	if err != nil {
		return fmt.Errorf("stop control plane: %w", err)
	}
	return nil
}

// Kubectl runs kubectl against the control plane as admin and returns its
// combined output.
func (cp *ControlPlane) Kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(cp.AssetsDir, "kubectl"), append([]string{"--kubeconfig", cp.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// CreateNamespace creates a namespace named prefix-<random> and returns its
// name. (envtest runs no namespace controller, so deleting one never
// finishes; tests use fresh namespaces instead.)
func (cp *ControlPlane) CreateNamespace(ctx context.Context, prefix string) (string, error) {
	ns, err := cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("create namespace %s-*: %w", prefix, err)
	}
	return ns.Name, nil
}

// GetLease reads a Lease.
func (cp *ControlPlane) GetLease(ctx context.Context, namespace, name string) (*coordinationv1.Lease, error) {
	l, err := cp.Client.CoordinationV1().Leases(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get lease %s/%s: %w", namespace, name, err)
	}
	return l, nil
}

// LeaseHolder returns the Lease's holderIdentity and leaseTransitions ("" and
// 0 where unset, or if l is nil).
func LeaseHolder(l *coordinationv1.Lease) (holder string, transitions int64) {
	if l == nil {
		return "", 0
	}
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	if l.Spec.LeaseTransitions != nil {
		transitions = int64(*l.Spec.LeaseTransitions)
	}
	return holder, transitions
}

// HolderOf returns the Lease's spec.holderIdentity ("" if unset or l is nil).
func HolderOf(l *coordinationv1.Lease) string {
	h, _ := LeaseHolder(l)
	return h
}

// TransitionsOf returns the Lease's spec.leaseTransitions (0 if unset or l is nil).
func TransitionsOf(l *coordinationv1.Lease) int64 {
	_, t := LeaseHolder(l)
	return t
}
