package chart

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/elector-sidecar/elector-sidecar/pkg/localapi"
	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// cluster is a real kube-apiserver + etcd (envtest, RBAC authorization on) shared by the subtests.
type cluster struct {
	cfg    *rest.Config
	kube   *kubernetes.Clientset
	dyn    *dynamic.DynamicClient
	mapper meta.RESTMapper
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	// The same binaries as test/integration: $KUBEBUILDER_ASSETS (hack/test.sh exports it), else
	// `hack/build-binaries.sh --print-dir`.
	bin, err := framework.AssetsDir()
	if err != nil {
		if requireBuiltBinaries() {
			t.Fatal(err)
		}
		t.Skipf("%v (ELECTOR_REQUIRE_APISERVER=1 or CI=true make this a failure)", err)
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: bin,
		// prometheus-operator's ServiceMonitor, PodMonitor and PrometheusRule (testdata/crds/README.md), so the
		// chart's monitoring objects are validated against their real schemas.
		CRDDirectoryPaths:     []string{filepath.Join("testdata", "crds")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting kube-apiserver from %s: %v", bin, err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Logf("stopping kube-apiserver: %v", err)
		}
	})
	kube := kubernetes.NewForConfigOrDie(cfg)
	dc := discovery.NewDiscoveryClientForConfigOrDie(cfg)
	return &cluster{
		cfg:    cfg,
		kube:   kube,
		dyn:    dynamic.NewForConfigOrDie(cfg),
		mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)),
	}
}

// requireBuiltBinaries: binaries that hack/build-binaries.sh builds (kube-apiserver, etcd, kubectl,
// helm) must be there; a missing one fails the test instead of skipping it. hack/test.sh's integration
// tier sets ELECTOR_REQUIRE_APISERVER=1; CI systems set CI=true.
func requireBuiltBinaries() bool {
	return os.Getenv("ELECTOR_REQUIRE_APISERVER") != "" || os.Getenv("CI") == "true"
}

func (c *cluster) createNamespace(t *testing.T, name string) {
	t.Helper()
	_, err := c.kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// apply server-side applies obj (dryRun: nothing is stored, but validation and admission run).
func (c *cluster) apply(ctx context.Context, obj *unstructured.Unstructured, dryRun bool) error {
	gvk := obj.GroupVersionKind()
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return fmt.Errorf("%s: %w", gvk, err)
	}
	opts := metav1.ApplyOptions{FieldManager: "elector-chart-test", Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	var ri dynamic.ResourceInterface = c.dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := obj.GetNamespace()
		if ns == "" {
			ns = "default"
		}
		ri = c.dyn.Resource(m.Resource).Namespace(ns)
	}
	_, err = ri.Apply(ctx, obj.GetName(), obj, opts)
	return err
}

func TestAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kube-apiserver")
	}
	c := startCluster(t)
	ctx := context.Background()

	// Everything the chart (every values file, and as a dependency) and config/ render is accepted by
	// the API server: schema, field validation, CEL compilation of the lease guard.
	t.Run("server-side dry-run apply", func(t *testing.T) {
		c.createNamespace(t, releaseNamespace)
		sources := map[string][]*unstructured.Unstructured{}
		for _, files := range valueFileSets(t) {
			sources["chart "+strings.Join(files, ",")] = mustRender(t, renderOpts{ValueFiles: files}).Objects
		}
		sources["chart plain-container+statefulset"] = mustRender(t, renderOpts{ValueFiles: []string{"plain-container.yaml", "statefulset.yaml"}}).Objects
		sources["chart fence with the holder check"] = mustRender(t, renderOpts{Set: []string{"fence.enabled=true", "fence.holderCheck.enabled=true", "fence.rbac.create=true",
			"fence.rules[0].apiGroups[0]=", "fence.rules[0].resources={configmaps}"}}).Objects
		for _, dir := range []string{"rbac", "lease-guard", "fence", "fence/holder-check", "fence/lease-anchor", "fence/role", "samples/demo", "samples/statefulset"} {
			objs := kustomize(t, dir).Objects
			for _, o := range objs {
				if o.GetKind() == "Namespace" {
					c.createNamespace(t, o.GetName())
				}
			}
			sources["config/"+dir] = objs
		}
		n := 0
		for src, objs := range sources {
			for _, o := range objs {
				if err := c.apply(ctx, o, true); err != nil {
					t.Errorf("%s: %s %s: %v", src, o.GetKind(), o.GetName(), err)
				}
				n++
			}
		}
		t.Logf("dry-run applied %d objects from %d sources", n, len(sources))
	})

	t.Run("sidecars as the chart's ServiceAccount, under the lease guard", func(t *testing.T) {
		testSidecarsWithChartRBAC(t, c)
	})

	t.Run("leader label by sidecars as the chart's ServiceAccount", func(t *testing.T) {
		testLeaderLabelWithChartRBAC(t, c)
	})

	t.Run("lease guard lets namespace deletion through", func(t *testing.T) {
		testGuardNamespaceDeletion(t, c)
	})

	t.Run("shard set: the Role covers a member, the lease guard the set", func(t *testing.T) {
		testShardSetRoleAndGuard(t, c)
	})

	t.Run("shard set: sidecars as the chart's ServiceAccount, under the lease guard", func(t *testing.T) {
		testShardSidecarsWithChartRBAC(t, c)
	})

	t.Run("monitoring, PDB and NetworkPolicy objects against the real schemas", func(t *testing.T) {
		testMonitoringDryRun(t, c)
	})
}

// installChart really applies the chart's objects (except the workload: envtest runs no pods).
func installChart(t *testing.T, c *cluster, ns string, set []string) rendered {
	t.Helper()
	c.createNamespace(t, ns)
	r := mustRenderAs(t, releaseName, ns, renderOpts{Set: set})
	for _, o := range r.Objects {
		if o.GetKind() == "Deployment" || o.GetKind() == "StatefulSet" {
			continue
		}
		if err := c.apply(context.Background(), o, false); err != nil {
			t.Fatalf("applying %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	return r
}

// waitGuardActive waits until the lease guard rejects a (dry-run) delete of the lease: policies reach
// the admission plugin asynchronously.
func waitGuardActive(t *testing.T, c *cluster, ns, lease string) {
	t.Helper()
	err := framework.Eventually(context.Background(), 200*time.Millisecond, 60*time.Second, "the lease guard to reject a dry-run delete of "+ns+"/"+lease,
		func(ctx context.Context) error {
			err := c.kube.CoordinationV1().Leases(ns).Delete(ctx, lease, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
			if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
				return nil
			}
			return fmt.Errorf("dry-run delete returned %v", err)
		})
	if err != nil {
		t.Fatal(err)
	}
}

// saKubeconfig writes a kubeconfig that authenticates as ns/sa with a TokenRequest token.
func saKubeconfig(t *testing.T, c *cluster, ns, sa string) string {
	t.Helper()
	tr, err := c.kube.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s/%s: %v", ns, sa, err)
	}
	return writeKubeconfig(t, c, "sa", &clientcmdapi.AuthInfo{Token: tr.Status.Token}, ns)
}

// writeKubeconfig writes a kubeconfig for the test apiserver with one user (as name) and
// ns as the default namespace, and returns its path.
func writeKubeconfig(t *testing.T, c *cluster, name string, user *clientcmdapi.AuthInfo, ns string) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: c.cfg.Host, CertificateAuthorityData: c.cfg.CAData}
	kc.AuthInfos[name] = user
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: name, Namespace: ns}
	kc.CurrentContext = name
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

var (
	buildMu   sync.Mutex
	buildBins = map[string]string{}
	buildDirs []string // removed by TestMain
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range buildDirs {
		_ = os.RemoveAll(d)
	}
	os.Exit(code)
}

// buildCmd builds ./cmd/NAME (./test/cmd/elector-demo for the demo app) once per test binary; $envVar, if set, names a
// prebuilt binary instead.
func buildCmd(t *testing.T, name, envVar string) string {
	t.Helper()
	if bin := os.Getenv(envVar); bin != "" {
		return bin
	}
	root := repoRoot(t)
	buildMu.Lock()
	defer buildMu.Unlock()
	if bin, ok := buildBins[name]; ok {
		return bin
	}
	dir, err := os.MkdirTemp("", "elector-chart-test-")
	if err != nil {
		t.Fatal(err)
	}
	buildDirs = append(buildDirs, dir)
	bin := filepath.Join(dir, name)
	pkg := "./cmd/" + name
	if name == "elector-demo" {
		pkg = "./test/cmd/" + name // the demo app is in the test module
	}
	// Static and -trimpath, as hack/image.sh builds the image's binaries: the unit tier's image test has
	// compiled them that way already, so this build is a link from the cache.
	cmd := framework.GoBuildCommand(root, pkg, "-trimpath", "-o", bin)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	buildBins[name] = bin
	return bin
}

// buildSidecar: ./cmd/elector-sidecar, or $ELECTOR_SIDECAR_BIN.
func buildSidecar(t *testing.T) string { return buildCmd(t, "elector-sidecar", "ELECTOR_SIDECAR_BIN") }

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

// sidecarProc is one running elector-sidecar, configured like the chart's container.
type sidecarProc struct {
	name string
	addr string
	// endpoint is the diagnostics listener (ELECTOR_HTTP_ENDPOINT), "" if none.
	endpoint string
	cmd      *exec.Cmd
	out      *framework.SyncBuffer
	done     chan error
}

// startContainer runs bin with the environment the chart gives container (the Downward API values
// filled in as the kubelet would for pod in ns), its args, and the overrides (replacing or adding env
// vars: per-process ports, and credentials instead of the in-cluster config).
func startContainer(t *testing.T, bin string, container corev1.Container, pod, ns string, overrides map[string]string) *sidecarProc {
	t.Helper()
	downward := map[string]string{"metadata.name": pod, "metadata.namespace": ns, "metadata.uid": "uid-" + pod}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	for _, e := range container.Env {
		v := e.Value
		if e.ValueFrom != nil {
			if e.ValueFrom.FieldRef == nil {
				t.Fatalf("env %s: only fieldRef is supported here", e.Name)
			}
			var ok bool
			if v, ok = downward[e.ValueFrom.FieldRef.FieldPath]; !ok {
				t.Fatalf("env %s: unknown fieldRef %s", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		}
		if o, ok := overrides[e.Name]; ok {
			v = o
		}
		env = append(env, e.Name+"="+v)
	}
	for k, v := range overrides {
		if !slices.ContainsFunc(container.Env, func(e corev1.EnvVar) bool { return e.Name == k }) {
			env = append(env, k+"="+v)
		}
	}
	cmd := exec.Command(bin, container.Args...)
	cmd.Env = env
	p := &sidecarProc{name: pod + "/" + container.Name, addr: overrides["ELECTOR_HTTP_ADDRESS"], endpoint: overrides["ELECTOR_HTTP_ENDPOINT"],
		cmd: cmd, out: &framework.SyncBuffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case err := <-p.done:
			p.done <- err
		default:
			_ = cmd.Process.Kill()
			p.done <- <-p.done
		}
		if t.Failed() {
			t.Logf("--- %s output:\n%s", p.name, p.out.String())
		}
	})
	return p
}

// startSidecar runs the sidecar as the chart configures it, with its local API on a free loopback port
// and the given kubeconfig (the chart's ServiceAccount) instead of the in-cluster config.
func startSidecar(t *testing.T, bin string, container corev1.Container, pod, ns, kubeconfig string) *sidecarProc {
	t.Helper()
	return startContainer(t, bin, container, pod, ns, map[string]string{
		"ELECTOR_HTTP_ADDRESS":  freeAddr(t), // the processes share this host's loopback
		"ELECTOR_HTTP_ENDPOINT": freeAddr(t), // the chart's diagnostics listener, on a free port
		"ELECTOR_KUBECONFIG":    kubeconfig,
	})
}

func (p *sidecarProc) leader() (localapi.LeaderResponse, error) {
	var s localapi.LeaderResponse
	client := http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get("http://" + p.addr + "/leader")
	if err != nil {
		return s, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("GET /leader: %s", resp.Status)
	}
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// waitInterval is how often the waits below check their condition (timeouts are generous: a loaded
// 2-core machine).
const waitInterval = 100 * time.Millisecond

func (p *sidecarProc) waitLeader(t *testing.T, want bool) localapi.LeaderResponse {
	t.Helper()
	var s localapi.LeaderResponse
	err := framework.Eventually(context.Background(), waitInterval, 60*time.Second, fmt.Sprintf("%s isLeader=%v", p.name, want), func(context.Context) error {
		var err error
		if s, err = p.leader(); err != nil {
			return err
		}
		if s.IsLeader != want || s.Holder == "" {
			return fmt.Errorf("/leader %+v", s)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// stop sends SIGTERM and waits for a clean exit (the sidecar releases the Lease on the way out).
func (p *sidecarProc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		if err != nil {
			t.Errorf("%s exited with %v after SIGTERM, want 0", p.name, err)
		}
		p.done <- err // for the cleanup
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not exit within 30s of SIGTERM", p.name)
	}
}

func testSidecarsWithChartRBAC(t *testing.T, c *cluster) {
	ctx := context.Background()
	const ns = "elector-rbac"
	bin := buildSidecar(t)
	r := installChart(t, c, ns, []string{
		"election.leaseDuration=3s", "election.renewDeadline=2s", "election.retryPeriod=500ms", "election.clockSkewMargin=200ms",
		"sidecar.logFormat=text", "sidecar.logLevel=debug", "leaseGuard.enabled=true",
	})
	pod, _ := podSpec(t, r, "Deployment")
	container := pod.Spec.InitContainers[0]
	lease := envMap(&container)["ELECTOR_LEASE_NAME"]
	kubeconfig := saKubeconfig(t, c, ns, pod.Spec.ServiceAccountName)

	// The Role is all the sidecar needs: it creates the Lease and leads.
	a := startSidecar(t, bin, container, "pod-a", ns, kubeconfig)
	sa := a.waitLeader(t, true)
	if sa.Holder != "pod-a" || sa.Lease != ns+"/"+lease {
		t.Errorf("pod-a /leader = %+v, want holder pod-a of %s/%s", sa, ns, lease)
	}
	// The chart's Lease labels (ELECTOR_LEASE_LABELS): `kubectl get lease -l app.kubernetes.io/instance=<release>`
	// finds the Lease the sidecar created.
	selector := "app.kubernetes.io/instance=" + releaseName + ",app.kubernetes.io/name=elector-sidecar"
	if leases, err := c.kube.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: selector}); err != nil {
		t.Fatal(err)
	} else if len(leases.Items) != 1 || leases.Items[0].Name != lease {
		t.Errorf("Leases in %s with %s: %d, want exactly %s", ns, selector, len(leases.Items), lease)
	}
	// From here on the guard is active (the Lease exists now; a dry-run DELETE proves the policy is loaded).
	waitGuardActive(t, c, ns, lease)
	b := startSidecar(t, bin, container, "pod-b", ns, kubeconfig)
	sb := b.waitLeader(t, false)
	// The chart's httpGet probes (the default) pass against a running sidecar's diagnostics listener, the
	// container port they name, retried as the kubelet would (readiness may trail /leader by a moment).
	for _, p := range []*corev1.Probe{container.StartupProbe, container.LivenessProbe, container.ReadinessProbe} {
		if p.HTTPGet == nil || p.HTTPGet.Port.String() != "metrics" || !slices.ContainsFunc(container.Ports, func(cp corev1.ContainerPort) bool {
			return cp.Name == "metrics" && envMap(&container)["ELECTOR_HTTP_ENDPOINT"] == fmt.Sprintf(":%d", cp.ContainerPort)
		}) {
			t.Fatalf("probe %+v: want httpGet on the container port metrics, the one ELECTOR_HTTP_ENDPOINT listens on", p)
		}
		url := "http://" + b.endpoint + p.HTTPGet.Path // the pod IP's port metrics: here each process has its own port
		err := framework.Eventually(ctx, waitInterval, 30*time.Second, "httpGet probe "+p.HTTPGet.Path+" to pass", func(ctx context.Context) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			defer func() { _ = resp.Body.Close() }()
			if resp.StatusCode < 200 || resp.StatusCode >= 400 { // the kubelet's rule
				return fmt.Errorf("GET %s: %s", url, resp.Status)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// The exec probes of sidecar.probes.mode=exec pass too (the image's /elector-sidecar is this binary).
	execPod, _ := podSpec(t, mustRender(t, renderOpts{Set: []string{"sidecar.probes.mode=exec"}}), "Deployment")
	execContainer := execPod.Spec.InitContainers[0]
	for _, p := range []*corev1.Probe{execContainer.StartupProbe, execContainer.LivenessProbe, execContainer.ReadinessProbe} {
		argv := append([]string(nil), p.Exec.Command...)
		argv[0] = bin
		for i, a := range argv {
			if strings.HasPrefix(a, "--http-address=") {
				argv[i] = "--http-address=" + b.addr // each test process has its own port
			}
		}
		err := framework.Eventually(ctx, waitInterval, 30*time.Second, fmt.Sprintf("probe %v to pass", p.Exec.Command), func(ctx context.Context) error {
			if out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput(); err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	// The demo app, as the chart runs it next to each sidecar, writes to its fenced ConfigMap store
	// with the same ServiceAccount: the Role covers it (get/update by name; the chart created it above).
	{
		demoBin := buildCmd(t, "elector-demo", "ELECTOR_DEMO_BIN")
		app := *findContainer(pod.Spec.Containers, "app")
		if !slices.Equal(app.Command, []string{"/elector-demo"}) {
			t.Fatalf("app command = %q, want /elector-demo", app.Command)
		}
		demoA := startContainer(t, demoBin, app, "pod-a", ns, map[string]string{"ELECTOR_DEMO_SIDECAR": "http://" + a.addr, "KUBECONFIG": kubeconfig})
		demoB := startContainer(t, demoBin, app, "pod-b", ns, map[string]string{"ELECTOR_DEMO_SIDECAR": "http://" + b.addr, "KUBECONFIG": kubeconfig})
		for _, w := range []struct {
			demo *sidecarProc
			line string
		}{{demoA, "result=accepted"}, {demoB, "result=not-leader"}} {
			err := framework.Eventually(ctx, waitInterval, 60*time.Second, fmt.Sprintf("%s to log %s", w.demo.name, w.line), func(context.Context) error {
				if out := w.demo.out.String(); !strings.Contains(out, w.line) {
					return fmt.Errorf("output so far:\n%s", out)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		store := strings.TrimPrefix(envMap(&app)["ELECTOR_DEMO_STORE"], "configmap:"+ns+"/")
		if _, err := c.kube.CoreV1().ConfigMaps(ns).Get(ctx, store, metav1.GetOptions{}); err != nil {
			t.Errorf("demo store ConfigMap %s: %v", store, err)
		}
		for _, d := range []*sidecarProc{demoA, demoB} {
			if strings.Contains(d.out.String(), "forbidden") {
				t.Errorf("%s hit RBAC: %s", d.name, d.out.String())
			}
			_ = d.cmd.Process.Signal(syscall.SIGTERM)
		}
	}

	// Renewals (UPDATEs that keep leaseTransitions) pass the guard.
	first, err := c.kube.CoordinationV1().Leases(ns).Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = framework.Eventually(ctx, waitInterval, 30*time.Second, "a renewal by pod-a", func(ctx context.Context) error {
		l, err := c.kube.CoordinationV1().Leases(ns).Get(ctx, lease, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.Spec.RenewTime != nil && first.Spec.RenewTime != nil && l.Spec.RenewTime.After(first.Spec.RenewTime.Time) &&
			ptr.Deref(l.Spec.HolderIdentity, "") == "pod-a" {
			return nil
		}
		return fmt.Errorf("lease spec %+v", l.Spec)
	})
	if err != nil {
		t.Fatal(err)
	}

	// The guard, as the cluster admin (RBAC would stop the ServiceAccount anyway).
	testGuardRejects(t, c, ns, lease)

	// Least privilege: the ServiceAccount cannot touch other Leases, or delete its own.
	saCfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	saKube := kubernetes.NewForConfigOrDie(saCfg)
	if _, err := saKube.CoordinationV1().Leases(ns).Get(ctx, "some-other-lease", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("ServiceAccount GET of another lease: %v, want Forbidden", err)
	}
	if err := saKube.CoordinationV1().Leases(ns).Delete(ctx, lease, metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("ServiceAccount DELETE of its lease: %v, want Forbidden", err)
	}
	if _, err := saKube.CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("ServiceAccount LIST of leases in default: %v, want Forbidden", err)
	}

	// Release (SIGTERM) and re-acquisition by pod-b (an UPDATE that raises leaseTransitions) pass the guard.
	before, err := c.kube.CoordinationV1().Leases(ns).Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a.stop(t)
	sb = b.waitLeader(t, true)
	after, err := c.kube.CoordinationV1().Leases(ns).Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ptr.Deref(after.Spec.HolderIdentity, "") != "pod-b" || ptr.Deref(after.Spec.LeaseTransitions, 0) <= ptr.Deref(before.Spec.LeaseTransitions, 0) {
		t.Errorf("after pod-a released: holder %q transitions %d (before %d), want pod-b with more transitions",
			ptr.Deref(after.Spec.HolderIdentity, ""), ptr.Deref(after.Spec.LeaseTransitions, 0), ptr.Deref(before.Spec.LeaseTransitions, 0))
	}
	t.Logf("pod-b leads with token %d (leaseTransitions %d -> %d)", sb.Token, ptr.Deref(before.Spec.LeaseTransitions, 0), ptr.Deref(after.Spec.LeaseTransitions, 0))
	b.stop(t)
}

// testGuardRejects: DELETE (single and collection) and lowering leaseTransitions are rejected with the
// guard's message; an update that keeps leaseTransitions is allowed; the namespace controller's user is exempt.
func testGuardRejects(t *testing.T, c *cluster, ns, lease string) {
	t.Helper()
	ctx := context.Background()
	leases := c.kube.CoordinationV1().Leases(ns)

	err := leases.Delete(ctx, lease, metav1.DeleteOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "guarded by elector-sidecar") {
		t.Errorf("DELETE of the lease: %v, want Forbidden by the guard", err)
	}
	err = leases.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	if err == nil || !strings.Contains(err.Error(), "guarded by elector-sidecar") {
		t.Errorf("DELETE of all leases in %s (DeleteCollection): %v, want rejected by the guard", ns, err)
	}
	if _, err := leases.Get(ctx, lease, metav1.GetOptions{}); err != nil {
		t.Fatalf("the lease is gone: %v", err)
	}

	// Lower leaseTransitions (a patch is an UPDATE to admission). Retry on conflicts with the sidecars.
	patch := func(transitions *int32, label string) error {
		l, err := leases.Get(ctx, lease, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if transitions != nil {
			l.Spec.LeaseTransitions = transitions
		}
		if l.Labels == nil {
			l.Labels = map[string]string{}
		}
		l.Labels["test"] = label
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	}
	retry := func(f func() error) error {
		for {
			if err := f(); !apierrors.IsConflict(err) {
				return err
			}
		}
	}
	cur, err := leases.Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ptr.Deref(cur.Spec.LeaseTransitions, 0) < 1 {
		// Make sure there is something to lower (as an allowed increase).
		if err := retry(func() error { return patch(ptr.To[int32](5), "raise") }); err != nil {
			t.Fatalf("raising leaseTransitions: %v", err)
		}
	}
	err = retry(func() error {
		l, err := leases.Get(ctx, lease, metav1.GetOptions{})
		if err != nil {
			return err
		}
		return patch(ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0)-1), "lower")
	})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "must not decrease") {
		t.Errorf("UPDATE lowering leaseTransitions: %v, want Forbidden by the guard", err)
	}
	err = retry(func() error {
		l, err := leases.Get(ctx, lease, metav1.GetOptions{})
		if err != nil {
			return err
		}
		l.Spec.LeaseTransitions = nil
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
	if !apierrors.IsForbidden(err) {
		t.Errorf("UPDATE clearing leaseTransitions: %v, want Forbidden by the guard", err)
	}
	if err := retry(func() error { return patch(nil, "same") }); err != nil {
		t.Errorf("UPDATE keeping leaseTransitions (a label): %v, want allowed", err)
	}
	// One write may raise the count by 10000 at most: MaxInt32 in one edit would exhaust every token.
	err = retry(func() error { return patch(ptr.To[int32](2147483647), "exhaust") })
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "may rise by at most 10000") {
		t.Errorf("UPDATE raising leaseTransitions to 2147483647: %v, want Forbidden by the guard", err)
	}
	err = retry(func() error {
		l, err := leases.Get(ctx, lease, metav1.GetOptions{})
		if err != nil {
			return err
		}
		return patch(ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0)+10000), "raise-by-10000")
	})
	if err != nil {
		t.Errorf("UPDATE raising leaseTransitions by 10000: %v, want allowed", err)
	}

	// The namespace controller's user may delete (dry run: keep the lease).
	imp := rest.CopyConfig(c.cfg)
	imp.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:kube-system:namespace-controller", Groups: []string{"system:masters"}}
	nc := kubernetes.NewForConfigOrDie(imp)
	if err := nc.CoordinationV1().Leases(ns).Delete(ctx, lease, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("dry-run DELETE as the namespace controller: %v, want allowed", err)
	}
	// Other leases in the namespace are not guarded.
	other := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "unguarded", Namespace: ns}, Spec: coordinationv1.LeaseSpec{LeaseTransitions: ptr.To[int32](3)}}
	if _, err := leases.Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := leases.Delete(ctx, "unguarded", metav1.DeleteOptions{}); err != nil {
		t.Errorf("DELETE of another lease: %v, want allowed", err)
	}
}

// testGuardNamespaceDeletion: once the namespace is being deleted, deleting the guarded Lease is
// allowed (envtest has no namespace controller, so the test deletes the Lease itself, as the
// controller would, one by one and as a collection).
func testGuardNamespaceDeletion(t *testing.T, c *cluster) {
	ctx := context.Background()
	for _, collection := range []bool{false, true} {
		ns := "elector-nsdel-single"
		if collection {
			ns = "elector-nsdel-collection"
		}
		r := installChart(t, c, ns, []string{"leaseGuard.enabled=true"})
		pod, _ := podSpec(t, r, "Deployment")
		lease := envMap(&pod.Spec.InitContainers[0])["ELECTOR_LEASE_NAME"]
		leases := c.kube.CoordinationV1().Leases(ns)
		if _, err := leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: lease, Namespace: ns},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("pod-a"), LeaseTransitions: ptr.To[int32](7)},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitGuardActive(t, c, ns, lease)

		if err := c.kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		got, err := c.kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil || got.DeletionTimestamp == nil {
			t.Fatalf("namespace %s after delete: %v %+v", ns, err, got)
		}
		// The admission plugin reads the namespace from an informer: allow it a moment to see the deletion.
		err = framework.Eventually(ctx, waitInterval, 30*time.Second, "the lease delete in the terminating namespace to be allowed", func(ctx context.Context) error {
			var err error
			if collection {
				err = leases.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
			} else {
				err = leases.Delete(ctx, lease, metav1.DeleteOptions{})
			}
			if err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			if _, err = leases.Get(ctx, lease, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("get: %v", err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
