package localcluster

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// The host side of the cluster: node IP, free ports, mounts, network (bridge, nftables, ip_forward)
// and cgroups. Only the nftables ruleset and deleting the bridge are exec'd (nft, ip).

// defaultRouteIface returns the interface of the IPv4 default route in a /proc/net/route table.
func defaultRouteIface(routes io.Reader) string {
	s := bufio.NewScanner(routes)
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) >= 8 && f[1] == "00000000" && f[7] == "00000000" {
			return f[0]
		}
	}
	return ""
}

// NodeIP returns the machine's non-loopback IPv4 address (for --node-ip): the default route's
// interface's, else any global one.
func NodeIP() (string, error) {
	dev := "eth0"
	if f, err := os.Open("/proc/net/route"); err == nil {
		if d := defaultRouteIface(f); d != "" {
			dev = d
		}
		_ = f.Close()
	}
	if ifc, err := net.InterfaceByName(dev); err == nil {
		if ip := globalIPv4(ifc); ip != "" {
			return ip, nil
		}
	}
	ifcs, _ := net.Interfaces()
	for i := range ifcs {
		if ifcs[i].Name == Bridge {
			continue
		}
		if ip := globalIPv4(&ifcs[i]); ip != "" {
			return ip, nil
		}
	}
	return "", errors.New("cannot find a non-loopback IPv4 address for --node-ip")
}

func globalIPv4(ifc *net.Interface) string {
	addrs, err := ifc.Addrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
			return n.IP.String()
		}
	}
	return ""
}

// portFree reports whether nothing listens on TCP port p (on any address).
func portFree(p int) bool {
	l, err := net.Listen("tcp", ":"+strconv.Itoa(p))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// FreePorts returns n distinct TCP ports in 20000-29999 for which free returns true. A port can
// still be taken between picking and binding it: `up` then tries again with new ports.
func FreePorts(n int, free func(int) bool) ([]int, error) {
	picked := map[int]bool{}
	var out []int
	for i := 0; i < 200*n && len(out) < n; i++ {
		p := 20000 + rand.IntN(10000)
		if picked[p] || !free(p) {
			continue
		}
		picked[p] = true
		out = append(out, p)
	}
	if len(out) < n {
		return nil, fmt.Errorf("found only %d of %d free TCP ports in 20000-29999", len(out), n)
	}
	return out, nil
}

// unescapeMount undoes the octal escapes of /proc/self/mountinfo (\040 space, \011 tab, \012
// newline, \134 backslash).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// MountsUnder returns the mount points at or below dir listed in a mountinfo table, deepest first.
func MountsUnder(mountinfo io.Reader, dir string) []string {
	dir = filepath.Clean(dir)
	var out []string
	s := bufio.NewScanner(mountinfo)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	// Deepest (longest) first; the same mount point can appear more than once (stacked mounts).
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer func() { _ = f.Close() }()
	return MountsUnder(f, dir)
}

// unmountUnder unmounts every mount point at or below dir (kubelet's bind mount of its root dir, pod
// volumes, container rootfs, sandbox shm, netns), deepest first; lazily as a last resort.
func unmountUnder(dir string) error {
	if _, err := os.Stat(dir); err != nil {
		return nil
	}
	if d, err := filepath.EvalSymlinks(dir); err == nil {
		dir = d
	}
	for pass := 1; pass <= 5; pass++ {
		mps := mountsUnder(dir)
		if len(mps) == 0 {
			return nil
		}
		flags := 0
		if pass >= 4 {
			flags = syscall.MNT_DETACH
		}
		for _, mp := range mps {
			_ = syscall.Unmount(mp, flags)
		}
	}
	if left := mountsUnder(dir); len(left) > 0 {
		return fmt.Errorf("mounts left under %s: %s", dir, strings.Join(left, " "))
	}
	return nil
}

// run runs a host command, returning its combined output in the error.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// applyDNAT loads the DNAT ruleset (rendered dnat.nft): the "kubernetes" Service (10.96.0.1:443)
// reaches the API server (there is no kube-proxy here).
func (c *Cluster) applyDNAT() error {
	if _, err := exec.LookPath("nft"); err != nil {
		return errors.New("nft (Debian package nftables; hack/install-deps.sh cluster) is needed for the kubernetes Service DNAT")
	}
	if err := run("nft", "-f", filepath.Join(c.Etc, "dnat.nft")); err != nil {
		return fmt.Errorf("nftables DNAT for %s:443: %w", KubernetesSvcIP, err)
	}
	return nil
}

// deleteNftTables deletes the DNAT table and the portmap plugin's cni_hostport tables (left behind
// when pods with hostPorts were killed).
func deleteNftTables() error {
	if _, err := exec.LookPath("nft"); err != nil {
		return nil
	}
	var errs []error
	for _, t := range [][]string{{"ip", NftTable}, {"ip", "cni_hostport"}, {"ip6", "cni_hostport"}} {
		if exec.Command("nft", "list", "table", t[0], t[1]).Run() == nil {
			errs = append(errs, run("nft", "delete", "table", t[0], t[1]))
		}
	}
	return errors.Join(errs...)
}

// deleteBridge deletes the CNI bridge link if it exists.
func deleteBridge() error {
	if _, err := net.InterfaceByName(Bridge); err != nil {
		return nil
	}
	return run("ip", "link", "delete", Bridge)
}

const ipForwardPath = "/proc/sys/net/ipv4/ip_forward"

// saveIPForward records net.ipv4.ip_forward (once: a second attempt must not save the bridge's 1).
func (c *Cluster) saveIPForward() error {
	if _, err := os.Stat(c.IPForwardSave); err == nil {
		return nil
	}
	b, err := os.ReadFile(ipForwardPath)
	if err != nil {
		return err
	}
	return os.WriteFile(c.IPForwardSave, b, 0o644)
}

// restoreIPForward restores the value saveIPForward recorded (the bridge plugin turns forwarding on).
func (c *Cluster) restoreIPForward() error {
	b, err := os.ReadFile(c.IPForwardSave)
	if err != nil {
		return nil
	}
	if v := strings.TrimSpace(string(b)); v == "0" || v == "1" {
		if err := os.WriteFile(ipForwardPath, []byte(v+"\n"), 0o644); err != nil {
			return fmt.Errorf("restore net.ipv4.ip_forward=%s: %w", v, err)
		}
	}
	return os.Remove(c.IPForwardSave)
}

// removeCgroups removes kubepods (every v1 hierarchy), the cluster's own cgroup, and containerd's
// k8s.io namespace cgroup. Only empty cgroups can be removed, so a k8s.io one in use by another
// containerd stays (and is not an error).
func removeCgroups() error {
	hiers, _ := filepath.Glob(filepath.Join(CgroupRoot, "*"))
	var errs []error
	for _, h := range hiers {
		for _, name := range []string{"kubepods", CgroupName, "k8s.io"} {
			dir := filepath.Join(h, name)
			if _, err := os.Stat(dir); err != nil {
				continue
			}
			removeTree(dir)
			if _, err := os.Stat(dir); err == nil && name != "k8s.io" {
				errs = append(errs, fmt.Errorf("could not remove cgroup %s", dir))
			}
		}
	}
	return errors.Join(errs...)
}

// removeTree rmdirs a cgroup directory tree, children first (cgroup dirs hold only virtual files).
func removeTree(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			removeTree(filepath.Join(dir, e.Name()))
		}
	}
	_ = syscall.Rmdir(dir)
}

// removeLogSymlinks removes kubelet's /var/log/containers symlinks that point into the state dir.
func (c *Cluster) removeLogSymlinks() error {
	links, _ := filepath.Glob("/var/log/containers/*.log")
	for _, l := range links {
		if t, err := os.Readlink(l); err == nil && strings.HasPrefix(t, c.State+"/") {
			_ = os.Remove(l)
		}
	}
	return nil
}
