//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// Election timings of every release: short, so takeovers are quick, and far
// from the limits a loaded 2-core machine could miss.
const (
	leaseDuration   = 4 * time.Second
	renewDeadline   = 3 * time.Second
	retryPeriod     = 500 * time.Millisecond
	clockSkewMargin = 500 * time.Millisecond
	replicas        = 3
)

// Names the chart gives things for release "e2e" (fullname "<release>-elector-sidecar").
const (
	releaseName   = "e2e"
	fullname      = "e2e-elector-sidecar"
	sidecarName   = "elector" // sidecar.name
	appName       = "app"     // app.name
	demoStoreName = fullname + "-demo-store"
)

// suiteConfig is read once from the environment by TestMain.
type suiteConfig struct {
	kubeconfig string
	kubectl    string
	helm       string
	helmHome   string
	chart      string
	imageRepo  string
	imageTag   string
	demoRepo   string // the demo image (demo apps and the helm test program)
	demoTag    string
	pullPolicy string
	// release: the packaged chart and images of `make release` (hack/e2e.sh builds one for this machine's
	// architecture, or takes ELECTOR_E2E_RELEASE_DIR's); nil when not given (ELECTOR_E2E_RELEASE_BUILD=0).
	release    *releaseUnderTest
	restConfig *rest.Config
	cs         kubernetes.Interface
}

var suite *suiteConfig

// releaseUnderTest is a release's packaged chart (NAME-VERSION.tgz) and its images, loaded on the nodes.
type releaseUnderTest struct {
	chart               string
	imageRepo, imageTag string
	demoRepo, demoTag   string
}

// splitImage splits REPOSITORY:TAG (no digest); env names the variable in the error.
func splitImage(env, image string) (repo, tag string, err error) {
	i := strings.LastIndex(image, ":")
	if i <= 0 || strings.Contains(image[i:], "/") || strings.Contains(image, "@") {
		return "", "", fmt.Errorf("%s %q: want REPOSITORY:TAG, loaded on the nodes (hack/e2e.sh sets it)", env, image)
	}
	return image[:i], image[i+1:], nil
}

// loadRelease reads ELECTOR_E2E_RELEASE_CHART, _IMAGE and _DEMO_IMAGE: all three or none.
func loadRelease() (*releaseUnderTest, error) {
	chart, image, demo := os.Getenv("ELECTOR_E2E_RELEASE_CHART"), os.Getenv("ELECTOR_E2E_RELEASE_IMAGE"), os.Getenv("ELECTOR_E2E_RELEASE_DEMO_IMAGE")
	if chart == "" && image == "" && demo == "" {
		return nil, nil
	}
	r := &releaseUnderTest{}
	var err error
	if r.imageRepo, r.imageTag, err = splitImage("ELECTOR_E2E_RELEASE_IMAGE", image); err != nil {
		return nil, err
	}
	if r.demoRepo, r.demoTag, err = splitImage("ELECTOR_E2E_RELEASE_DEMO_IMAGE", demo); err != nil {
		return nil, err
	}
	if !strings.HasSuffix(chart, ".tgz") {
		return nil, fmt.Errorf("ELECTOR_E2E_RELEASE_CHART %q: want the packaged chart (NAME-VERSION.tgz) of `make release`", chart)
	}
	if _, err := os.Stat(chart); err != nil {
		return nil, fmt.Errorf("ELECTOR_E2E_RELEASE_CHART: %w", err)
	}
	if r.chart, err = filepath.Abs(chart); err != nil {
		return nil, err
	}
	return r, nil
}

func TestMain(m *testing.M) {
	c, err := loadSuiteConfig()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		os.Exit(1)
	}
	suite = c
	code := m.Run()
	printTimings()
	_ = os.RemoveAll(c.helmHome)
	os.Exit(code)
}

func loadSuiteConfig() (*suiteConfig, error) {
	c := &suiteConfig{kubeconfig: os.Getenv("KUBECONFIG")}
	if c.kubeconfig == "" {
		return nil, errors.New("KUBECONFIG is not set: point it at the cluster to test (hack/e2e.sh does)")
	}
	image := os.Getenv("ELECTOR_E2E_IMAGE")
	if image == "" {
		return nil, errors.New("ELECTOR_E2E_IMAGE is not set: the image under test as REPOSITORY:TAG, loaded on the nodes (hack/e2e.sh does)")
	}
	i := strings.LastIndex(image, ":")
	if i <= 0 || strings.Contains(image[i:], "/") || strings.Contains(image, "@") {
		return nil, fmt.Errorf("ELECTOR_E2E_IMAGE %q: want REPOSITORY:TAG", image)
	}
	c.imageRepo, c.imageTag = image[:i], image[i+1:]
	demo := os.Getenv("ELECTOR_E2E_DEMO_IMAGE")
	j := strings.LastIndex(demo, ":")
	if j <= 0 || strings.Contains(demo[j:], "/") || strings.Contains(demo, "@") {
		return nil, fmt.Errorf("ELECTOR_E2E_DEMO_IMAGE %q: want the demo image under test as REPOSITORY:TAG, loaded on the nodes (hack/e2e.sh sets it)", demo)
	}
	c.demoRepo, c.demoTag = demo[:j], demo[j+1:]
	c.pullPolicy = envOr("ELECTOR_E2E_PULL_POLICY", "Never")
	rel, err := loadRelease()
	if err != nil {
		return nil, err
	}
	c.release = rel

	chart := os.Getenv("ELECTOR_E2E_CHART")
	if chart == "" {
		chart = filepath.Join("..", "..", "charts", "elector-sidecar") // go test runs in the package directory
	}
	abs, err := filepath.Abs(chart)
	if err != nil {
		return nil, err
	}
	// A chart directory, or a packaged chart (.tgz, as `make release` writes it).
	if strings.HasSuffix(abs, ".tgz") {
		if _, err := os.Stat(abs); err != nil {
			return nil, fmt.Errorf("chart %s: %w (set ELECTOR_E2E_CHART)", abs, err)
		}
	} else if _, err := os.Stat(filepath.Join(abs, "Chart.yaml")); err != nil {
		return nil, fmt.Errorf("chart %s: %w (set ELECTOR_E2E_CHART)", abs, err)
	}
	c.chart = abs

	if c.kubectl, err = findTool("KUBECTL", "kubectl"); err != nil {
		return nil, err
	}
	if c.helm, err = findTool("HELM", "helm"); err != nil {
		return nil, err
	}
	// Helm's own config and cache in a throwaway directory: nothing of the user's is read or written.
	if c.helmHome, err = os.MkdirTemp("", "elector-e2e-helm-"); err != nil {
		return nil, err
	}

	c.restConfig, err = clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", c.kubeconfig, err)
	}
	c.restConfig.QPS, c.restConfig.Burst = 50, 100
	c.restConfig.UserAgent = "elector-sidecar-e2e"
	if c.cs, err = kubernetes.NewForConfig(c.restConfig); err != nil {
		return nil, err
	}
	var v string
	err = framework.Eventually(context.Background(), time.Second, 30*time.Second, "the cluster in "+c.kubeconfig+" to answer", func(context.Context) error {
		sv, err := c.cs.Discovery().ServerVersion()
		if err != nil {
			return err
		}
		v = sv.GitVersion
		return nil
	})
	if err != nil {
		return nil, err
	}
	fmt.Printf("e2e: cluster %s (KUBECONFIG=%s), image %s, demo image %s (pull policy %s), chart %s, kubectl %s, helm %s\n",
		v, c.kubeconfig, image, demo, c.pullPolicy, c.chart, c.kubectl, c.helm)
	if r := c.release; r != nil {
		fmt.Printf("e2e: release under test: chart %s, image %s:%s, demo image %s:%s\n", r.chart, r.imageRepo, r.imageTag, r.demoRepo, r.demoTag)
	}
	return c, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// findTool: $ENV, else NAME on PATH, else the hack/ binaries cache.
func findTool(env, name string) (string, error) {
	if p := os.Getenv(env); p != "" {
		return exec.LookPath(p)
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	p := filepath.Join(framework.CacheBinDir(), name)
	if st, err := os.Stat(p); err == nil && !st.IsDir() {
		return p, nil
	}
	return "", fmt.Errorf("%s not found: set %s, put it on PATH, or build it with hack/build-binaries.sh", name, env)
}

// Timings: every test records what it measured; TestMain prints them all at the end.
var timings struct {
	sync.Mutex
	lines []string
}

// timing logs one measured duration and keeps it for the summary.
func timing(t *testing.T, what string, d time.Duration) {
	t.Helper()
	s := fmt.Sprintf("%-34s %-46s %8.2fs", t.Name(), what, d.Seconds())
	t.Logf("timing: %s %.2fs", what, d.Seconds())
	timings.Lock()
	timings.lines = append(timings.lines, s)
	timings.Unlock()
}

// note keeps a non-duration measurement (a count) for the summary.
func note(t *testing.T, what string, v any) {
	t.Helper()
	s := fmt.Sprintf("%-34s %-46s %9v", t.Name(), what, v)
	t.Logf("measured: %s %v", what, v)
	timings.Lock()
	timings.lines = append(timings.lines, s)
	timings.Unlock()
}

func printTimings() {
	timings.Lock()
	defer timings.Unlock()
	if len(timings.lines) == 0 {
		return
	}
	fmt.Println("e2e timings:")
	for _, l := range timings.lines {
		fmt.Println("  " + l)
	}
}
