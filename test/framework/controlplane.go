package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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
		ControlPlaneStopTimeout:  30 * time.Second,
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

// StopAPIServer stops kube-apiserver (etcd keeps running) and returns when the
// process has exited.
func (cp *ControlPlane) StopAPIServer() error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if !cp.apiserverUp {
		return nil
	}
	if err := cp.Env.ControlPlane.APIServer.Stop(); err != nil {
		return fmt.Errorf("stop kube-apiserver: %w", err)
	}
	cp.apiserverUp = false
	cp.stoppedAt = time.Now()
	return nil
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
		cp.logFile.Close()
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
// 0 where unset).
func LeaseHolder(l *coordinationv1.Lease) (holder string, transitions int64) {
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	if l.Spec.LeaseTransitions != nil {
		transitions = int64(*l.Spec.LeaseTransitions)
	}
	return holder, transitions
}
