package localcluster

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func testCluster(t *testing.T) *Cluster {
	t.Helper()
	dir := t.TempDir()
	c := New(NewLayout("/repo", dir, "/cache/bin", "v1.37.2"))
	c.NodeIP = "192.0.2.10"
	c.Ports = Ports{Etcd: 21001, EtcdPeer: 21002, APIServer: 21003, ControllerManager: 21004, Scheduler: 21005, Kubelet: 21006, KubeletHealthz: 21007}
	c.PauseRef = "registry.k8s.io/pause:3.10.2"
	c.Log = &bytes.Buffer{}
	return c
}

func rendered(t *testing.T, c *Cluster) map[string]string {
	t.Helper()
	files, err := c.Configs()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range files {
		out[filepath.Base(f.Path)] = string(f.Content)
	}
	return out
}

func requireLines(t *testing.T, name, content string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(content, w) {
			t.Errorf("%s lacks %q:\n%s", name, w, content)
		}
	}
}

func TestKubeletConfigHasTheSettingsThisMachineNeeds(t *testing.T) {
	c := testCluster(t)
	kc := rendered(t, c)["kubelet.yaml"]
	requireLines(t, "kubelet.yaml", kc,
		"kind: KubeletConfiguration",
		"port: 21006\n", "healthzPort: 21007\n",
		"cgroupDriver: cgroupfs\n", "failCgroupV1: false\n", "failSwapOn: false\n",
		"oomScoreAdj: 0\n", // no CAP_SYS_RESOURCE
		"makeIPTablesUtilChains: false\n",
		"imageGCHighThresholdPercent: 100\n",
		"memory.available: 1Mi\n", "nodefs.available: 1%\n",
		"resolvConf: /etc/resolv.conf\n",
		"containerRuntimeEndpoint: unix://"+c.ContainerdSock+"\n",
		"imageServiceEndpoint: unix://"+c.ContainerdSock+"\n",
		"tlsCertFile: "+c.PKI+"/kubelet-serving.crt\n",
		"clientCAFile: "+c.PKI+"/ca.crt\n",
		"staticPodPath: "+c.Data+"/manifests\n",
	)
}

func TestContainerdConfigHasTheSettingsThisMachineNeeds(t *testing.T) {
	c := testCluster(t)
	cc := rendered(t, c)["containerd.toml"]
	requireLines(t, "containerd.toml", cc,
		"version = 4\n",
		"root = '"+c.Data+"/containerd/root'",
		"state = '"+c.Data+"/containerd/state'",
		"address = '"+c.ContainerdSock+"'",
		"restrict_oom_score_adj = true",
		"snapshotter = 'overlayfs'",
		"sandbox = 'registry.k8s.io/pause:3.10.2'",
		"SystemdCgroup = false",
		"BinaryName = '/cache/bin/runc'",
		"bin_dirs = ['/cache/bin/cni']",
		"conf_dir = '"+c.Data+"/cni/net.d'",
	)
	if strings.Contains(cc, "<no value>") {
		t.Errorf("containerd.toml has an unset value:\n%s", cc)
	}
}

func TestCNIConfigIsBridgeHostLocalAndNftablesPortmap(t *testing.T) {
	c := testCluster(t)
	var conf struct {
		Name    string
		Plugins []map[string]any
	}
	if err := json.Unmarshal([]byte(rendered(t, c)["10-elector.conflist"]), &conf); err != nil {
		t.Fatalf("the CNI conflist is not JSON: %v", err)
	}
	if len(conf.Plugins) != 2 {
		t.Fatalf("plugins: %v", conf.Plugins)
	}
	bridge, portmap := conf.Plugins[0], conf.Plugins[1]
	if bridge["type"] != "bridge" || bridge["bridge"] != Bridge || bridge["isGateway"] != true || bridge["ipMasq"] != false {
		t.Errorf("bridge plugin: %v", bridge)
	}
	ipam := bridge["ipam"].(map[string]any)
	if ipam["type"] != "host-local" || ipam["dataDir"] != c.Data+"/cni/ipam" {
		t.Errorf("ipam: %v", ipam)
	}
	if got := ipam["ranges"].([]any)[0].([]any)[0].(map[string]any)["subnet"]; got != PodSubnet {
		t.Errorf("pod subnet %v, want %s", got, PodSubnet)
	}
	if portmap["type"] != "portmap" || portmap["backend"] != "nftables" {
		t.Errorf("portmap plugin (no iptables binary here: nftables backend): %v", portmap)
	}
}

func TestDNATSendsTheKubernetesServiceToTheAPIServer(t *testing.T) {
	c := testCluster(t)
	nft := rendered(t, c)["dnat.nft"]
	want := "ip daddr 10.96.0.1 tcp dport 443 dnat to 192.0.2.10:21003"
	if strings.Count(nft, want) != 2 {
		t.Errorf("want %q in both the prerouting and the output chain:\n%s", want, nft)
	}
	requireLines(t, "dnat.nft", nft, "delete table ip elector_sidecar\n", "hook prerouting", "hook output")
}

func TestKubeconfigsUseEachComponentsCertificate(t *testing.T) {
	c := testCluster(t)
	if err := c.WritePKI(c.PKI); err != nil {
		t.Fatal(err)
	}
	files, err := c.Kubeconfigs()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f.Path))
		if f.Mode != 0o600 {
			t.Errorf("%s mode %v, want 0600 (it holds a key)", f.Path, f.Mode)
		}
		s := string(f.Content)
		requireLines(t, f.Path, s, "server: https://127.0.0.1:21003\n", "current-context: elector-local\n")
		user := strings.TrimSuffix(filepath.Base(f.Path), ".kubeconfig")
		if f.Path == c.Kubeconfig {
			user = "admin"
		}
		crt, _ := os.ReadFile(filepath.Join(c.PKI, user+".crt"))
		requireLines(t, f.Path, s, "- name: "+user+"\n", "client-certificate-data: "+base64.StdEncoding.EncodeToString(crt)+"\n")
	}
	want := []string{"kubeconfig", "kube-controller-manager.kubeconfig", "kube-scheduler.kubeconfig", "kubelet.kubeconfig"}
	if !slices.Equal(names, want) {
		t.Errorf("kubeconfigs %v, want %v", names, want)
	}
}

func TestRenderFailsOnAMissingValue(t *testing.T) {
	if _, err := Render("kubeconfig", map[string]any{"Port": 1}); err == nil {
		t.Fatal("rendering a kubeconfig without its certificates succeeded")
	}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM", path)
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestPKICertificatesVerifyAgainstTheCAWithTheRightNamesAndUsages(t *testing.T) {
	c := testCluster(t)
	if err := c.WritePKI(c.PKI); err != nil {
		t.Fatal(err)
	}
	ca := readCert(t, filepath.Join(c.PKI, "ca.crt"))
	if !ca.IsCA {
		t.Fatal("ca.crt is not a CA")
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	for _, s := range c.certSpecs() {
		cert := readCert(t, filepath.Join(c.PKI, s.Name+".crt"))
		opts := x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{s.Use}}
		if _, err := cert.Verify(opts); err != nil {
			t.Errorf("%s does not verify against the CA for %v: %v", s.Name, s.Use, err)
		}
		if cert.Subject.CommonName != s.CN {
			t.Errorf("%s CN %q, want %q", s.Name, cert.Subject.CommonName, s.CN)
		}
		if s.Org != "" && !slices.Equal(cert.Subject.Organization, []string{s.Org}) {
			t.Errorf("%s O %v, want %s", s.Name, cert.Subject.Organization, s.Org)
		}
		if _, err := os.Stat(filepath.Join(c.PKI, s.Name+".key")); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
	}
	api := readCert(t, filepath.Join(c.PKI, "apiserver.crt"))
	for _, host := range []string{"127.0.0.1", "192.0.2.10", "10.96.0.1", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"} {
		if err := api.VerifyHostname(host); err != nil {
			t.Errorf("apiserver certificate: %v", err)
		}
	}
	serving := readCert(t, filepath.Join(c.PKI, "kubelet-serving.crt"))
	for _, host := range []string{"192.0.2.10", NodeName} {
		if err := serving.VerifyHostname(host); err != nil {
			t.Errorf("kubelet serving certificate: %v", err)
		}
	}
	if !slices.Equal(readCert(t, filepath.Join(c.PKI, "kubelet.crt")).Subject.Organization, []string{"system:nodes"}) {
		t.Error("the kubelet's client certificate is not in system:nodes (the Node authorizer needs it)")
	}
	if fi, err := os.Stat(filepath.Join(c.PKI, "ca.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("ca.key: %v %v, want mode 0600", fi.Mode(), err)
	}
	for _, f := range []string{"sa.key", "sa.pub"} {
		if _, err := os.Stat(filepath.Join(c.PKI, f)); err != nil {
			t.Error(err)
		}
	}
}

func names(steps []Step) []string {
	var out []string
	for _, s := range steps {
		out = append(out, s.Name)
	}
	return out
}

func TestStartStepsRunInDependencyOrder(t *testing.T) {
	got := names(StartSteps())
	before := func(a, b string) {
		t.Helper()
		ia, ib := slices.Index(got, a), slices.Index(got, b)
		if ia < 0 || ib < 0 || ia >= ib {
			t.Errorf("%q must come before %q in %q", a, b, got)
		}
	}
	before("node ip and ports", "certificates") // the apiserver certificate names the node IP
	before("certificates", "kubeconfigs")
	before("kubeconfigs", "configs")
	before("configs", "start etcd")
	before("host", "start etcd") // the pids cgroup exists before anything joins it
	before("start etcd", "wait etcd")
	before("wait etcd", "start kube-apiserver")
	before("start kube-apiserver", "wait kube-apiserver")
	before("wait kube-apiserver", "start kube-controller-manager")
	before("wait kube-apiserver", "start kube-scheduler")
	before("start containerd", "wait containerd")
	before("wait containerd", "import images")
	before("import images", "start kubelet") // the pause image is there before the first sandbox
	before("kubernetes service dnat", "start kubelet")
	before("start kubelet", "wait node ready")
	before("wait node ready", "wait default serviceaccount")
	if want := []string{"etcd", "containerd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet"}; !slices.Equal(startedComponents(), want) {
		t.Errorf("components start as %v, want %v", startedComponents(), want)
	}
}

func TestTeardownStopsComponentsInReverseStartOrder(t *testing.T) {
	var stops []string
	for _, n := range names(TeardownSteps()) {
		if name, ok := strings.CutPrefix(n, stopPrefix); ok {
			stops = append(stops, name)
		}
	}
	want := slices.Clone(startedComponents())
	slices.Reverse(want)
	if !slices.Equal(stops, want) {
		t.Errorf("teardown stops %v, want the reverse of the start order %v", stops, want)
	}
	got := names(TeardownSteps())
	for _, later := range []string{"unmount", "nftables", "bridge", "ip_forward", "cgroups", "state files", "owner"} {
		if slices.Index(got, later) < slices.Index(got, "kill cluster cgroup") {
			t.Errorf("%q runs before every process is gone: %q", later, got)
		}
	}
	if slices.Index(got, "unmount") > slices.Index(got, "state files") {
		t.Errorf("state files are removed before the unmount: %q", got)
	}
}

func TestRunAllRunsEveryStepWhenOneFails(t *testing.T) {
	c := testCluster(t)
	var ran []string
	step := func(name string, err error) Step {
		return Step{name, func(context.Context, *Cluster) error { ran = append(ran, name); return err }}
	}
	errA, errC := errors.New("a broke"), errors.New("c broke")
	err := RunAll(context.Background(), c, []Step{step("a", errA), step("b", nil), step("c", errC), step("d", nil)})
	if !slices.Equal(ran, []string{"a", "b", "c", "d"}) {
		t.Errorf("ran %v, want every step", ran)
	}
	if !errors.Is(err, errA) || !errors.Is(err, errC) {
		t.Errorf("error %v does not carry both failures", err)
	}
}

func TestRunStepsStopsAtTheFirstFailureAndNamesTheStep(t *testing.T) {
	c := testCluster(t)
	var ran []string
	step := func(name string, err error) Step {
		return Step{name, func(context.Context, *Cluster) error { ran = append(ran, name); return err }}
	}
	err := RunSteps(context.Background(), c, []Step{step("a", nil), step("b", errors.New("boom")), step("c", nil)})
	if !slices.Equal(ran, []string{"a", "b"}) {
		t.Errorf("ran %v, want a, b", ran)
	}
	if err == nil || err.Error() != "b: boom" {
		t.Errorf("error %v, want %q", err, "b: boom")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran = nil
	if err := RunSteps(ctx, c, []Step{step("a", nil)}); err == nil || len(ran) != 0 {
		t.Errorf("a cancelled run ran %v (error %v)", ran, err)
	}
}

func TestForeignTeardownNeverSignalsAReusedPIDAndIsIdempotent(t *testing.T) {
	c := testCluster(t)
	for _, d := range []string{c.Data, c.Run, c.Etc, c.PKI} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A PID file naming this test process, whose binary is not the recorded one: never signalled.
	if err := os.WriteFile(c.pidFile("kubelet"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.exeFile("kubelet"), []byte("/cache/bin/kubelet\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.ours("kubelet"); ok {
		t.Fatal("a PID running another binary counts as the kubelet")
	}
	steps := ForeignTeardownSteps() // the host steps need root; the per-state-dir ones do not
	for i := 0; i < 2; i++ {        // idempotent
		if err := RunAll(context.Background(), c, steps); err != nil {
			t.Fatalf("teardown %d: %v", i+1, err)
		}
	}
	for _, d := range []string{c.Data, c.Run, c.Etc, c.PKI, c.Kubeconfig} {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind (%v)", d, err)
		}
	}
}

func TestFreePortsAreDistinctInRangeAndFree(t *testing.T) {
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	taken := l.Addr().(*net.TCPAddr).Port
	if portFree(taken) {
		t.Errorf("port %d has a listener but counts as free", taken)
	}
	ports, err := FreePorts(7, func(p int) bool { return p%2 == 1 }) // every even port is taken
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p%2 == 0 || p < 20000 || p > 29999 || seen[p] {
			t.Errorf("ports %v: %d is taken, out of range or repeated", ports, p)
		}
		seen[p] = true
	}
	if _, err := FreePorts(1, func(int) bool { return false }); err == nil {
		t.Error("no free port, but no error")
	}
}

func TestMountsUnderListsNestedMountsDeepestFirst(t *testing.T) {
	mountinfo := `22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw
100 22 8:1 /data/kubelet /state/data/kubelet rw - ext4 /dev/sda1 rw
101 100 0:50 / /state/data/kubelet/pods/x/volumes/kubernetes.io~projected/kube-api-access rw - tmpfs tmpfs rw
102 22 0:51 / /state/data/containerd/state/io.containerd.grpc.v1.cri/sandboxes/abc/shm rw - tmpfs shm rw
103 22 0:52 / /state/data-other rw - tmpfs tmpfs rw
104 22 0:53 / /state/data/with\040space rw - tmpfs tmpfs rw
`
	got := MountsUnder(strings.NewReader(mountinfo), "/state/data/")
	want := []string{
		"/state/data/kubelet/pods/x/volumes/kubernetes.io~projected/kube-api-access",
		"/state/data/containerd/state/io.containerd.grpc.v1.cri/sandboxes/abc/shm",
		"/state/data/with space",
		"/state/data/kubelet",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

func TestNodeIPComesFromTheDefaultRouteInterface(t *testing.T) {
	routes := `Iface	Destination	Gateway 	Flags	RefCnt	Use	Metric	Mask		MTU	Window	IRTT
eth1	000200C0	00000000	0001	0	0	0	00FFFFFF	0	0	0
eth0	00000000	010200C0	0003	0	0	0	00000000	0	0	0
`
	if got := defaultRouteIface(strings.NewReader(routes)); got != "eth0" {
		t.Errorf("default route interface %q, want eth0", got)
	}
}

func TestProcStateReadsPastACommandWithParentheses(t *testing.T) {
	if got := procState("42 (a) b (c)) Z 1 42 42 0"); got != "Z" {
		t.Errorf("state %q, want Z", got)
	}
	if !alive(os.Getpid()) || alive(0) || alive(-1) {
		t.Error("alive is wrong about this process or an invalid PID")
	}
}

func TestEnvOutputIsEvaluableExportLines(t *testing.T) {
	c := testCluster(t)
	var before bytes.Buffer
	if err := c.WriteEnv(&before); err != nil {
		t.Fatal(err)
	}
	if want := "export KUBECONFIG=" + c.Kubeconfig + "\nexport PATH=/cache/bin:$PATH\n"; before.String() != want {
		t.Errorf("env without a cluster:\n%s\nwant:\n%s", before.String(), want)
	}
	c.ContainerdSock = "/state/containerd.sock"
	if err := writeConfigs(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := c.WriteEnv(&out); err != nil {
		t.Fatal(err)
	}
	want := "export KUBECONFIG=" + c.Kubeconfig + "\n" +
		"export PATH=/cache/bin:$PATH\n" +
		"export ELECTOR_CLUSTER_NODE_NAME=elector-node\n" +
		"export ELECTOR_CLUSTER_NODE_IP=192.0.2.10\n" +
		"export ELECTOR_CLUSTER_API_PORT=21003\n" +
		"export ELECTOR_CLUSTER_ETCD_PORT=21001\n" +
		"export ELECTOR_CLUSTER_KUBELET_PORT=21006\n" +
		"export ELECTOR_CLUSTER_CONTAINERD_SOCK=/state/containerd.sock\n" +
		"export ELECTOR_CLUSTER_PAUSE_IMAGE=registry.k8s.io/pause:3.10.2\n"
	if out.String() != want {
		t.Errorf("env:\n%s\nwant:\n%s", out.String(), want)
	}
	// up's second call (cluster already running) reads the socket back from the env file.
	c2 := New(c.Layout)
	if err := c2.loadEnv(); err != nil || c2.ContainerdSock != "/state/containerd.sock" || c2.NodeIP != "192.0.2.10" {
		t.Errorf("loadEnv: %v, sock %q, ip %q", err, c2.ContainerdSock, c2.NodeIP)
	}
}

func TestLayoutFromEnvNamesWhatIsMissing(t *testing.T) {
	t.Setenv("ELECTOR_ROOT", "/repo")
	t.Setenv("ELECTOR_CACHE", "")
	t.Setenv("ELECTOR_BIN", "/bin")
	t.Setenv("K8S_VERSION", "")
	_, err := LayoutFromEnv()
	if err == nil || !strings.Contains(err.Error(), "ELECTOR_CACHE, K8S_VERSION") {
		t.Errorf("error %v, want it to name ELECTOR_CACHE and K8S_VERSION", err)
	}
}

func TestInheritedDescriptorsDoNotReachComponents(t *testing.T) {
	// As a caller's `flock FILE cmd` leaves its lock: a descriptor without close-on-exec.
	fd, err := syscall.Open(filepath.Join(t.TempDir(), "lock"), syscall.O_CREAT|syscall.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Close(fd) }()
	cloexec := func() bool {
		flags, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0)
		if errno != 0 {
			t.Fatal(errno)
		}
		return flags&syscall.FD_CLOEXEC != 0
	}
	if cloexec() {
		t.Fatal("test setup: the descriptor is close-on-exec already")
	}
	closeInheritedFDs()
	if !cloexec() {
		t.Error("an inherited descriptor stays open across exec: components would hold it")
	}
}

func TestComponentCommandLinesHaveTheRequiredFlags(t *testing.T) {
	c := testCluster(t)
	for _, name := range startedComponents() {
		if componentArgs[name] == nil {
			t.Fatalf("component %s has no command line", name)
		}
	}
	flags := func(name string) string { return " " + strings.Join(componentArgs[name](c), " ") + " " }
	requireLines(t, "kube-apiserver", flags("kube-apiserver"),
		" --authorization-mode Node,RBAC ",
		" --kubelet-preferred-address-types InternalIP,Hostname ", // kubectl logs/exec
		" --service-account-issuer https://kubernetes.default.svc.cluster.local ",
		" --service-account-key-file "+c.PKI+"/sa.pub ",
		" --service-account-signing-key-file "+c.PKI+"/sa.key ",
		" --secure-port 21003 ", " --advertise-address 192.0.2.10 ",
		" --etcd-servers http://127.0.0.1:21001 ",
		" --service-cluster-ip-range "+ServiceCIDR+" ")
	requireLines(t, "kube-controller-manager", flags("kube-controller-manager"),
		" --use-service-account-credentials ", " --service-account-private-key-file "+c.PKI+"/sa.key ",
		" --root-ca-file "+c.PKI+"/ca.crt ", " --leader-elect=false ", " --secure-port 21004 ")
	requireLines(t, "kube-scheduler", flags("kube-scheduler"), " --leader-elect=false ", " --secure-port 21005 ")
	requireLines(t, "kubelet", flags("kubelet"),
		" --node-ip 192.0.2.10 ", // the machine's address, not 127.0.0.1
		" --hostname-override "+NodeName+" ", " --config "+c.Etc+"/kubelet.yaml ")
	requireLines(t, "etcd", flags("etcd"), " --listen-client-urls http://127.0.0.1:21001 ", " --initial-cluster elector=http://127.0.0.1:21002 ")
}
