package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Step is one named action of up or down.
type Step struct {
	Name string
	Do   func(ctx context.Context, c *Cluster) error
}

// componentArgs are the command lines of the processes `up` starts (each a binary in Layout.Bin
// of the same name). StartSteps orders them; TeardownSteps stops them in reverse order.
var componentArgs = map[string]func(c *Cluster) []string{
	"etcd": func(c *Cluster) []string {
		client := fmt.Sprintf("http://127.0.0.1:%d", c.Ports.Etcd)
		peer := fmt.Sprintf("http://127.0.0.1:%d", c.Ports.EtcdPeer)
		return []string{"--name", "elector", "--data-dir", filepath.Join(c.Data, "etcd"),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", "elector=" + peer, "--unsafe-no-fsync", "--log-level", "warn"}
	},
	"containerd": func(c *Cluster) []string {
		return []string{"--config", filepath.Join(c.Etc, "containerd.toml")}
	},
	"kube-apiserver": func(c *Cluster) []string {
		p := c.pkiPath
		return []string{
			"--etcd-servers", fmt.Sprintf("http://127.0.0.1:%d", c.Ports.Etcd),
			"--bind-address", "0.0.0.0", "--secure-port", fmt.Sprint(c.Ports.APIServer), "--advertise-address", c.NodeIP,
			"--tls-cert-file", p("apiserver.crt"), "--tls-private-key-file", p("apiserver.key"),
			"--client-ca-file", p("ca.crt"),
			"--authorization-mode", "Node,RBAC",
			"--enable-admission-plugins", "NodeRestriction",
			"--allow-privileged=true",
			"--service-cluster-ip-range", ServiceCIDR,
			"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file", p("sa.pub"), "--service-account-signing-key-file", p("sa.key"),
			"--kubelet-client-certificate", p("apiserver-kubelet-client.crt"), "--kubelet-client-key", p("apiserver-kubelet-client.key"),
			"--kubelet-certificate-authority", p("ca.crt"),
			// Without it, kubectl logs/exec fail resolving the node name.
			"--kubelet-preferred-address-types", "InternalIP,Hostname",
			"--profiling=false", "--v", "1"}
	},
	"kube-controller-manager": func(c *Cluster) []string {
		kc := filepath.Join(c.Etc, "kube-controller-manager.kubeconfig")
		return []string{"--kubeconfig", kc, "--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
			"--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(c.Ports.ControllerManager),
			// Without it, the controllers cannot create anything.
			"--use-service-account-credentials",
			"--service-account-private-key-file", c.pkiPath("sa.key"), "--root-ca-file", c.pkiPath("ca.crt"),
			"--cluster-signing-cert-file", c.pkiPath("ca.crt"), "--cluster-signing-key-file", c.pkiPath("ca.key"),
			"--service-cluster-ip-range", ServiceCIDR,
			"--leader-elect=false", "--profiling=false", "--v", "1"}
	},
	"kube-scheduler": func(c *Cluster) []string {
		kc := filepath.Join(c.Etc, "kube-scheduler.kubeconfig")
		return []string{"--kubeconfig", kc, "--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
			"--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(c.Ports.Scheduler),
			"--leader-elect=false", "--profiling=false", "--v", "1"}
	},
	"kubelet": func(c *Cluster) []string {
		return []string{"--config", filepath.Join(c.Etc, "kubelet.yaml"), "--kubeconfig", filepath.Join(c.Etc, "kubelet.kubeconfig"),
			"--root-dir", filepath.Join(c.Data, "kubelet"), "--cert-dir", filepath.Join(c.Data, "kubelet", "pki"),
			"--hostname-override", NodeName, "--node-ip", c.NodeIP, "--v", "1"}
	},
}

func (c *Cluster) pkiPath(name string) string { return filepath.Join(c.PKI, name) }

const startPrefix, stopPrefix = "start ", "stop "

func start(name string) Step {
	return Step{startPrefix + name, func(_ context.Context, c *Cluster) error {
		return c.startDetached(name, c.bin(name), componentArgs[name](c)...)
	}}
}

func stop(name string) Step {
	return Step{stopPrefix + name, func(_ context.Context, c *Cluster) error { return c.stopComponent(name) }}
}

// StartSteps are the steps of one attempt at starting the cluster, in order. (Building the binaries
// and the pause image, and cleaning up stale state, come before: see Up.)
func StartSteps() []Step {
	return []Step{
		{"node ip and ports", pickAddresses},
		{"owner", func(_ context.Context, c *Cluster) error { return os.WriteFile(OwnerFile, []byte(c.State+"\n"), 0o644) }},
		{"certificates", func(_ context.Context, c *Cluster) error { return c.WritePKI(c.PKI) }},
		{"kubeconfigs", func(_ context.Context, c *Cluster) error {
			files, err := c.Kubeconfigs()
			if err != nil {
				return err
			}
			return writeFiles(files)
		}},
		{"configs", writeConfigs},
		{"host", func(_ context.Context, c *Cluster) error {
			if err := os.MkdirAll(pidsCgroup(), 0o755); err != nil {
				return err
			}
			return c.saveIPForward()
		}},
		start("etcd"),
		// containerd does not depend on the control plane: started early, it is ready by the time the kubelet starts.
		start("containerd"),
		{"wait etcd", waitEtcd},
		start("kube-apiserver"),
		{"wait kube-apiserver", waitAPIServer},
		start("kube-controller-manager"),
		start("kube-scheduler"),
		{"wait containerd", waitContainerd},
		{"import images", func(ctx context.Context, c *Cluster) error {
			return c.importImages(ctx, append([]string{c.PauseTar}, c.ExtraImages...))
		}},
		{"kubernetes service dnat", func(_ context.Context, c *Cluster) error { return c.applyDNAT() }},
		start("kubelet"),
		{"wait node ready", waitNodeReady},
		{"wait default serviceaccount", waitServiceAccount},
	}
}

// TeardownSteps undo everything StartSteps did; every one runs even if others fail. Components stop
// in the reverse of their start order, after the pods (kubelet first, so that it does not restart
// containers while they are being stopped).
func TeardownSteps() []Step {
	steps := []Step{
		stop("kubelet"),
		{"kill pod processes", func(_ context.Context, c *Cluster) error { return c.killCgroup("pod processes", kubepodsCgroup()) }},
	}
	starts := startedComponents()
	for i := len(starts) - 1; i >= 0; i-- {
		if starts[i] != "kubelet" {
			steps = append(steps, stop(starts[i]))
		}
	}
	return append(steps,
		// Containerd's shims, or a component whose PID file was lost.
		Step{"kill cluster cgroup", func(_ context.Context, c *Cluster) error {
			return c.killCgroup("remaining cluster processes (shims)", pidsCgroup())
		}},
		Step{"kill pod processes again", func(_ context.Context, c *Cluster) error { return c.killCgroup("pod processes", kubepodsCgroup()) }},
		Step{"unmount", func(_ context.Context, c *Cluster) error { return unmountUnder(c.Data) }},
		Step{"nftables", func(_ context.Context, c *Cluster) error { return deleteNftTables() }},
		Step{"bridge", func(_ context.Context, c *Cluster) error { return deleteBridge() }},
		Step{"ip_forward", func(_ context.Context, c *Cluster) error { return c.restoreIPForward() }},
		Step{"cgroups", func(_ context.Context, c *Cluster) error { return removeCgroups() }},
		Step{"log symlinks", func(_ context.Context, c *Cluster) error { return c.removeLogSymlinks() }},
		Step{"state files", removeState},
		Step{"owner", func(_ context.Context, c *Cluster) error { return removeIfExists(OwnerFile) }},
	)
}

// ForeignTeardownSteps tear down only this state dir's own processes and files, when the machine's
// cluster resources (bridge, kubepods cgroups, DNAT) belong to a cluster of another state dir.
func ForeignTeardownSteps() []Step {
	var steps []Step
	starts := startedComponents()
	for i := len(starts) - 1; i >= 0; i-- {
		steps = append(steps, stop(starts[i]))
	}
	return append(steps,
		Step{"unmount", func(_ context.Context, c *Cluster) error { return unmountUnder(c.Data) }},
		Step{"state files", removeState})
}

// startedComponents lists the components in the order StartSteps starts them.
func startedComponents() []string {
	var out []string
	for _, s := range StartSteps() {
		if len(s.Name) > len(startPrefix) && s.Name[:len(startPrefix)] == startPrefix {
			out = append(out, s.Name[len(startPrefix):])
		}
	}
	return out
}

// RunSteps runs steps in order and stops at the first error.
func RunSteps(ctx context.Context, c *Cluster, steps []Step) error {
	for _, s := range steps {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("before %s: %w", s.Name, err)
		}
		t0 := time.Now()
		if err := s.Do(ctx, c); err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		if d := time.Since(t0); d >= time.Second {
			c.Logf("%s: done in %v", s.Name, d.Round(100*time.Millisecond))
		}
	}
	return nil
}

// RunAll runs every step, whatever the others return, and joins their errors.
func RunAll(ctx context.Context, c *Cluster, steps []Step) error {
	var errs []error
	for _, s := range steps {
		if err := s.Do(ctx, c); err != nil {
			c.Logf("WARNING: %s: %v", s.Name, err)
			errs = append(errs, fmt.Errorf("%s: %w", s.Name, err))
		}
	}
	return errors.Join(errs...)
}

func pickAddresses(_ context.Context, c *Cluster) error {
	ip, err := NodeIP()
	if err != nil {
		return err
	}
	c.NodeIP = ip
	p, err := FreePorts(7, portFree)
	if err != nil {
		return err
	}
	c.Ports = Ports{Etcd: p[0], EtcdPeer: p[1], APIServer: p[2], ControllerManager: p[3], Scheduler: p[4], Kubelet: p[5], KubeletHealthz: p[6]}
	c.Logf("node %s ip %s; ports: apiserver %d etcd %d/%d kcm %d scheduler %d kubelet %d/%d", NodeName, ip,
		p[2], p[0], p[1], p[3], p[4], p[5], p[6])
	return nil
}

func writeConfigs(_ context.Context, c *Cluster) error {
	for _, d := range []string{"kubelet", "pod-logs", "manifests", "containerd/root", "containerd/state", "containerd/runc",
		"containerd/opt", "cni/ipam", "cni/net.d", "kubelet-plugins"} {
		if err := os.MkdirAll(filepath.Join(c.Data, d), 0o755); err != nil {
			return err
		}
	}
	files, err := c.Configs()
	if err != nil {
		return err
	}
	return writeFiles(files)
}

func removeState(_ context.Context, c *Cluster) error {
	var errs []error
	for _, p := range []string{c.Data, c.Run, c.Etc, c.PKI, c.Kubeconfig} {
		if err := os.RemoveAll(p); err != nil {
			// A mount that appeared meanwhile: unmount and try once more.
			_ = unmountUnder(c.Data)
			if err := os.RemoveAll(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
