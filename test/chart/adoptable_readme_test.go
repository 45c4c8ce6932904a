package chart

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// readmeValuesFile is the values file of the README's "Add it to your Deployment".
func readmeValuesFile(t *testing.T) string {
	t.Helper()
	var found []string
	for _, b := range framework.MarkdownCodeBlocks(readFile(t, filepath.Join(repoRoot(t), "README.md"))) {
		if b.Lang == "yaml" && b.Under("Add it to your Deployment") {
			found = append(found, b.Code)
		}
	}
	if len(found) != 1 {
		t.Fatalf("README.md has %d yaml blocks under \"Add it to your Deployment\", want the one values file", len(found))
	}
	return found[0]
}

// TestReadmeValuesFileRendersYourAppAlone: the README's minimal values file (about ten lines) passes the schema
// and renders the user's app with three candidates for its own Lease, nothing imposed on the app container.
// test/e2e's TestReadmeValuesFileElectsOneLeaderAndPassesHelmTest installs it in real pods.
func TestReadmeValuesFileRendersYourAppAlone(t *testing.T) {
	code := readmeValuesFile(t)
	if n := strings.Count(strings.TrimSpace(code), "\n") + 1; n > 14 {
		t.Errorf("the README's values file has %d lines, want about ten", n)
	}
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	var vals struct {
		Election struct{ LeaseName string } `json:"election"`
		App      struct {
			Image struct{ Repository, Tag string }
		} `json:"app"`
	}
	if err := yaml.Unmarshal([]byte(code), &vals); err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(f)
	r := mustRender(t, renderOpts{ValueFiles: []string{mustRel(t, abs)}})
	pod, replicas := podSpec(t, r, "Deployment")
	if replicas == nil || *replicas != 3 {
		t.Errorf("replicas %v, want 3", replicas)
	}
	sidecar, app := sidecarAndAppOf(t, pod, "app")
	if want := vals.App.Image.Repository + ":" + vals.App.Image.Tag; app.Image != want {
		t.Errorf("app image %q, want %q", app.Image, want)
	}
	if env := envMap(sidecar); env["ELECTOR_LEASE_NAME"] != vals.Election.LeaseName || vals.Election.LeaseName == "" {
		t.Errorf("lease %q, want the values file's %q", env["ELECTOR_LEASE_NAME"], vals.Election.LeaseName)
	}
	if app.SecurityContext != nil || app.Resources.Limits != nil || app.Resources.Requests != nil || len(app.VolumeMounts) != 0 {
		t.Errorf("app container: securityContext %+v resources %+v mounts %v; want nothing the user did not set", app.SecurityContext, app.Resources, app.VolumeMounts)
	}
}

// mustRel makes an absolute path relative to testdata/values (render's ValueFiles are relative to it).
func mustRel(t *testing.T, abs string) string {
	t.Helper()
	base, _ := filepath.Abs(filepath.Join("testdata", "values"))
	rel, err := filepath.Rel(base, abs)
	if err != nil {
		t.Fatal(err)
	}
	return rel
}

// TestReadmeFirstScreenSaysWhatItIsAndHowToAddIt: the first 40 lines say what the project is and reach "Add it
// to your Deployment"; the test tiers are no longer there.
func TestReadmeFirstScreenSaysWhatItIsAndHowToAddIt(t *testing.T) {
	lines := strings.Split(readFile(t, filepath.Join(repoRoot(t), "README.md")), "\n")
	first := strings.Join(lines[:min(40, len(lines))], "\n")
	for _, want := range []string{"leader-election sidecar for Kubernetes", "fencing token", "## Add it to your Deployment", "LICENSE"} {
		if !strings.Contains(first, want) {
			t.Errorf("the README's first 40 lines lack %q", want)
		}
	}
	for _, notYet := range []string{"| tier |", "## Two commands"} {
		if strings.Contains(first, notYet) {
			t.Errorf("the README's first 40 lines contain %q: it belongs lower down or in CONTRIBUTING.md", notYet)
		}
	}
	for _, f := range []string{"LICENSE", "CHANGELOG.md", "CONTRIBUTING.md", "SECURITY.md"} {
		if b, err := os.ReadFile(filepath.Join(repoRoot(t), f)); err != nil || len(b) < 500 {
			t.Errorf("%s: %v (%d bytes)", f, err, len(b))
		}
	}
	if lic := readFile(t, filepath.Join(repoRoot(t), "LICENSE")); !strings.Contains(lic, "Apache License") || !strings.Contains(lic, "Version 2.0, January 2004") {
		t.Error("LICENSE is not the Apache License 2.0")
	}
}

// TestOneVersionEverywhere: Chart.yaml's version and appVersion are one X.Y.Z, CHANGELOG.md has its section,
// and every image reference in config/, the READMEs and the NOTES' examples carries it (a release bumps them
// together; hack/release.sh refuses a VERSION the tree does not carry).
func TestOneVersionEverywhere(t *testing.T) {
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, filepath.Join(chartDir(t), "Chart.yaml"))), &chart); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`).MatchString(chart.Version) || chart.AppVersion != chart.Version {
		t.Fatalf("Chart.yaml version %q appVersion %q: want one X.Y.Z (no v)", chart.Version, chart.AppVersion)
	}
	v := chart.Version
	if !strings.Contains(readFile(t, filepath.Join(repoRoot(t), "CHANGELOG.md")), "## ["+v+"]") {
		t.Errorf("CHANGELOG.md has no ## [%s] section", v)
	}
	ref := regexp.MustCompile(`(?:ghcr\.io/elector-sidecar/elector-(?:sidecar|demo)|elector-sidecar-)[:-]?(v?[0-9]+\.[0-9]+\.[0-9]+)`)
	var files []string
	for _, f := range []string{"README.md", "charts/elector-sidecar/README.md", "CONTRIBUTING.md", "test/chart/testdata/parent/Chart.yaml"} {
		files = append(files, filepath.Join(repoRoot(t), f))
	}
	_ = filepath.WalkDir(filepath.Join(repoRoot(t), "config"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".yaml") {
			files = append(files, p)
		}
		return nil
	})
	seen := 0
	for _, f := range files {
		for _, m := range ref.FindAllStringSubmatch(readFile(t, f), -1) {
			seen++
			if m[1] != v {
				t.Errorf("%s: %q names version %s, want %s", f, m[0], m[1], v)
			}
		}
	}
	if seen < 4 {
		t.Errorf("found %d versioned references, want the config/ images and the README's chart at least", seen)
	}
}
