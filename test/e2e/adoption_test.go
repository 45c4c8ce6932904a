//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// TestReadmeValuesFileElectsOneLeaderAndPassesHelmTest installs the README's "Add it to your Deployment" as
// written, with its `helm install` command and its values file, plus only what points it at the images under
// test (the app: the demo image's fenced store, a long-running stand-in for "your app") and this suite's short
// timings. The chart and images are a release's: the package and images `make release` built (hack/e2e.sh builds
// one of HEAD for this machine's architecture, or takes ELECTOR_E2E_RELEASE_DIR's), as a user installs them;
// only with ELECTOR_E2E_RELEASE_BUILD=0 does it install the checkout's chart and images instead. It wants
// three Ready pods, one leader on the README's Lease, and `helm test` (the chart's test hook: one leader among
// the metrics Service's endpoints) to pass.
func TestReadmeValuesFileElectsOneLeaderAndPassesHelmTest(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var valuesYAML string
	var install []string
	for _, b := range framework.MarkdownCodeBlocks(string(readme)) {
		if !b.Under("Add it to your Deployment") {
			continue
		}
		switch b.Lang {
		case "yaml":
			valuesYAML = b.Code
		case "console":
			for _, c := range framework.ConsoleCommands(b.Code) {
				if strings.HasPrefix(c.Command, "helm install ") {
					install = strings.Fields(c.Command)
				}
			}
		}
	}
	// helm install NAME CHART -n NS --create-namespace -f values.yaml
	if valuesYAML == "" || len(install) != 9 || install[4] != "-n" || install[6] != "--create-namespace" || install[7] != "-f" || install[8] != "values.yaml" {
		t.Fatalf("README \"Add it to your Deployment\": values file %q, install command %q; want a yaml block and `helm install NAME CHART -n NS --create-namespace -f values.yaml`", valuesYAML, install)
	}
	chart := suite.chart
	img := releaseUnderTest{imageRepo: suite.imageRepo, imageTag: suite.imageTag, demoRepo: suite.demoRepo, demoTag: suite.demoTag}
	if rel := suite.release; rel != nil {
		chart, img = rel.chart, *rel
		t.Logf("installing the release: %s with images %s:%s and %s:%s", chart, img.imageRepo, img.imageTag, img.demoRepo, img.demoTag)
	} else {
		t.Logf("no release given (ELECTOR_E2E_RELEASE_BUILD=0): installing the checkout's chart %s with %s:%s", chart, img.imageRepo, img.imageTag)
	}
	if strings.HasSuffix(chart, ".tgz") && filepath.Base(chart) != install[3] {
		t.Errorf("the README installs %s, the release packaged %s", install[3], filepath.Base(chart))
	}
	var vals struct {
		Election struct {
			LeaseName string `json:"leaseName"`
		} `json:"election"`
		Workload struct {
			Replicas int `json:"replicas"`
		} `json:"workload"`
	}
	if err := yaml.Unmarshal([]byte(valuesYAML), &vals); err != nil || vals.Election.LeaseName == "" || vals.Workload.Replicas != replicas {
		t.Fatalf("the README's values: %+v, %v; want election.leaseName and %d replicas", vals, err, replicas)
	}

	r := newRelease(t, "readme")
	r.lease = vals.Election.LeaseName
	dir := t.TempDir()
	valuesFile, overrides := filepath.Join(dir, "values.yaml"), filepath.Join(dir, "images-under-test.yaml")
	if err := os.WriteFile(valuesFile, []byte(valuesYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(overrides, []byte(fmt.Sprintf(`image: {repository: %q, tag: %q, pullPolicy: %s}
demo:
  image: {repository: %q, tag: %q}
app:
  image: {repository: %q, tag: %q, pullPolicy: %s}
  command: ["/elector-demo", "store", "--listen", "127.0.0.1:7070"]
election: {leaseDuration: %s, renewDeadline: %s, retryPeriod: %s, clockSkewMargin: %s}
`, img.imageRepo, img.imageTag, suite.pullPolicy, img.demoRepo, img.demoTag, img.demoRepo, img.demoTag, suite.pullPolicy,
		leaseDuration, renewDeadline, retryPeriod, clockSkewMargin)), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r.helmOK(2*time.Minute, "install", releaseName, chart, "--namespace", r.ns, "--values", valuesFile, "--values", overrides)
	r.waitPodsReady(replicas, 4*time.Minute)
	timing(t, "README values: helm install -> 3 pods Ready", time.Since(start))
	leader, token := r.mustLeader(t)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lease, err := suite.cs.CoordinationV1().Leases(r.ns).Get(ctx, vals.Election.LeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the README's Lease %s: %v", vals.Election.LeaseName, err)
	}
	if h := lease.Spec.HolderIdentity; h == nil || *h != leader || lease.Spec.LeaseTransitions == nil || int64(*lease.Spec.LeaseTransitions) < token {
		t.Errorf("Lease %s holder %v transitions %v, want %s with token %d", lease.Name, lease.Spec.HolderIdentity, lease.Spec.LeaseTransitions, leader, token)
	}

	start = time.Now()
	out := r.helmOK(4*time.Minute, "test", releaseName, "--namespace", r.ns, "--timeout", "3m", "--logs")
	timing(t, "helm test", time.Since(start))
	if !strings.Contains(out, "Succeeded") || !strings.Contains(out, "PASS: 3 endpoints") {
		t.Errorf("helm test did not report one leader among 3 endpoints:\n%s", out)
	}
}
