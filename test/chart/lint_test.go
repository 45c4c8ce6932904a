package chart

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/cli/values"
	"helm.sh/helm/v4/pkg/getter"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// valueFileSets are the values files every lint and render check runs with (nil = chart defaults).
func valueFileSets(t *testing.T) [][]string {
	sets := [][]string{nil}
	files, err := filepath.Glob(filepath.Join("testdata", "values", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		sets = append(sets, []string{filepath.Base(f)})
	}
	return sets
}

// TestLint is `helm lint --strict` through the SDK: no errors and no warnings, with the defaults and
// with every values file.
func TestLint(t *testing.T) {
	kv, err := common.ParseKubeVersion(defaultKubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	for _, files := range valueFileSets(t) {
		t.Run(filepath.Join(append([]string{"values"}, files...)...), func(t *testing.T) {
			opts := values.Options{}
			for _, f := range files {
				opts.ValueFiles = append(opts.ValueFiles, filepath.Join("testdata", "values", f))
			}
			vals, err := opts.MergeValues(getter.Providers{})
			if err != nil {
				t.Fatal(err)
			}
			lint := action.NewLint()
			lint.Strict = true
			lint.Namespace = releaseNamespace
			lint.KubeVersion = kv
			res := lint.Run([]string{chartDir(t)}, vals)
			for _, m := range res.Messages {
				t.Logf("lint: %s", m)
			}
			if len(res.Errors) > 0 || action.HasWarningsOrErrors(res) {
				t.Errorf("helm lint --strict: %d errors: %v", len(res.Errors), res.Errors)
			}
			if res.TotalChartsLinted != 1 {
				t.Errorf("linted %d charts, want 1", res.TotalChartsLinted)
			}
		})
	}
}

// TestLintCLI runs the real helm binary (built by hack/build-binaries.sh) when it is there.
func TestLintCLI(t *testing.T) {
	helm := filepath.Join(framework.CacheBinDir(), "helm")
	if _, err := os.Stat(helm); err != nil {
		if requireBuiltBinaries() {
			t.Fatalf("no helm binary at %s: run hack/build-binaries.sh", helm)
		}
		t.Skipf("no helm binary at %s (hack/build-binaries.sh builds it); TestLint covered the same checks through the SDK", helm)
	}
	for _, files := range valueFileSets(t) {
		args := []string{"lint", "--strict", chartDir(t)}
		for _, f := range files {
			args = append(args, "-f", filepath.Join("testdata", "values", f))
		}
		out, err := exec.Command(helm, args...).CombinedOutput()
		if err != nil {
			t.Errorf("helm %v: %v\n%s", args, err, out)
		}
		// `helm template` with the CLI's own default Kubernetes version renders too.
		targs := []string{"template", "elector-sidecar", chartDir(t), "-n", releaseNamespace}
		for _, f := range files {
			targs = append(targs, "-f", filepath.Join("testdata", "values", f))
		}
		if out, err := exec.Command(helm, targs...).CombinedOutput(); err != nil {
			t.Errorf("helm %v: %v\n%s", targs, err, out)
		}
	}
}
