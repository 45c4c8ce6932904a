// Package localcluster runs a real single-node Kubernetes cluster on this machine (root, cgroup v1, no
// Docker, no registry): etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd (with
// a seccomp runc) and a kubelet, with bridge CNI networking. hack/local-cluster.sh builds the binaries
// (hack/build-binaries.sh --cluster) and runs test/cmd/localcluster, which drives this package.
//
// Up and Down are explicit, ordered lists of named steps (see steps.go), in the style of kind's
// actions. Components run detached (own session, log file in Layout.Logs) inside one v1 pids cgroup
// and are tracked by PID files plus the binary each PID must run, so `up` can return while the
// cluster keeps running and `down` never signals a reused PID. Down runs every teardown step even
// when one fails, and is idempotent.
package localcluster

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Fixed names and addresses of the cluster (one per machine).
const (
	NodeName        = "elector-node"
	PodSubnet       = "10.88.0.0/16"
	ServiceCIDR     = "10.96.0.0/16"
	KubernetesSvcIP = "10.96.0.1"
	Bridge          = "elector0"
	NftTable        = "elector_sidecar"
	// CgroupName is the v1 pids cgroup holding every process `up` starts (and containerd's shims).
	CgroupName = "elector-sidecar-cluster"
	// GlobalLock serialises up and down machine-wide.
	GlobalLock = "/run/lock/elector-sidecar-cluster.lock"
	// OwnerFile names the state dir of the cluster that owns the machine's cluster resources (bridge,
	// kubepods cgroups, DNAT), so that a cluster from another cache dir is never torn down.
	OwnerFile = "/run/elector-sidecar-cluster.owner"
)

// CgroupRoot is the cgroup v1 mount root.
var CgroupRoot = "/sys/fs/cgroup"

// Layout is where a cluster keeps its state, all under Cache/cluster.
type Layout struct {
	Root       string // repository root (hack/local-cluster-smoke.sh, ...)
	Cache      string // ELECTOR_CACHE
	Bin        string // ELECTOR_BIN: etcd, kube-*, containerd, runc, cni/, mkimage
	K8sVersion string // k8s.io/kubernetes version the binaries were built from (pause source)

	State, Run, Logs, PKI, Etc, Data, Images string
	Kubeconfig, IPForwardSave, EnvFile       string
}

// NewLayout derives every path from the repository root, the cache dir, the bin dir and the
// Kubernetes version (hack/lib.sh's ELECTOR_ROOT, ELECTOR_CACHE, ELECTOR_BIN, K8S_VERSION).
func NewLayout(root, cache, bin, k8sVersion string) Layout {
	state := filepath.Join(cache, "cluster")
	run := filepath.Join(state, "run")
	return Layout{
		Root: root, Cache: cache, Bin: bin, K8sVersion: k8sVersion,
		State:         state,
		Run:           run,
		Logs:          filepath.Join(state, "logs"),
		PKI:           filepath.Join(state, "pki"),
		Etc:           filepath.Join(state, "etc"),
		Data:          filepath.Join(state, "data"), // etcd, containerd root/state, kubelet root, CNI state
		Images:        filepath.Join(cache, "images"),
		Kubeconfig:    filepath.Join(state, "kubeconfig"),
		IPForwardSave: filepath.Join(state, "ip_forward.orig"),
		EnvFile:       filepath.Join(run, "cluster.env"),
	}
}

// LayoutFromEnv reads ELECTOR_ROOT, ELECTOR_CACHE, ELECTOR_BIN and K8S_VERSION (set by
// hack/local-cluster.sh from hack/lib.sh).
func LayoutFromEnv() (Layout, error) {
	var missing []string
	get := func(k string) string {
		v := os.Getenv(k)
		if v == "" {
			missing = append(missing, k)
		}
		return v
	}
	l := NewLayout(get("ELECTOR_ROOT"), get("ELECTOR_CACHE"), get("ELECTOR_BIN"), get("K8S_VERSION"))
	if len(missing) > 0 {
		return Layout{}, fmt.Errorf("%s not set (run this through hack/local-cluster.sh)", strings.Join(missing, ", "))
	}
	return l, nil
}

// Ports are the TCP ports the components listen on, picked free per attempt.
type Ports struct {
	Etcd, EtcdPeer, APIServer, ControllerManager, Scheduler, Kubelet, KubeletHealthz int
}

// Cluster is one attempt at running the cluster: the layout plus what `up` decided (node IP, ports,
// the pause image) and the images to import.
type Cluster struct {
	Layout
	NodeIP         string
	Ports          Ports
	ContainerdSock string
	PauseRef       string // registry.k8s.io/pause:<tag>
	PauseTar       string
	ExtraImages    []string // ELECTOR_IMAGES
	KeepOnFailure  bool     // ELECTOR_KEEP_ON_FAILURE

	// Log receives progress lines; nil: os.Stderr.
	Log   io.Writer
	start time.Time
}

// New returns a cluster for layout l.
func New(l Layout) *Cluster {
	return &Cluster{Layout: l, ContainerdSock: filepath.Join(l.Data, "containerd", "containerd.sock"), start: time.Now()}
}

// Logf writes a progress line, prefixed like hack/lib.sh's log.
func (c *Cluster) Logf(format string, args ...any) {
	w := c.Log
	if w == nil {
		w = os.Stderr
	}
	if c.start.IsZero() {
		c.start = time.Now()
	}
	fmt.Fprintf(w, "[localcluster +%ds] %s\n", int(time.Since(c.start).Seconds()), fmt.Sprintf(format, args...))
}

func (c *Cluster) bin(name string) string { return filepath.Join(c.Bin, name) }

// pidsCgroup is the cluster's own v1 pids cgroup directory.
func pidsCgroup() string { return filepath.Join(CgroupRoot, "pids", CgroupName) }

// kubepodsCgroup is kubelet's pids cgroup for pods.
func kubepodsCgroup() string { return filepath.Join(CgroupRoot, "pids", "kubepods") }
