package main

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/elector-sidecar/elector-sidecar/internal/testsupport"
)

// Packages the sidecar binary must not link (issue 12: binary size and idle
// RSS). client-go's clientset, its typed clients and
// k8s.io/client-go/kubernetes/scheme link and register the types of every
// API group; pkg/kubeclient is the sidecar's client instead. client-go's
// tools/record (its event correlator) links strategic merge patch and the
// OpenAPI models; kubeclient.Recorder writes the Events instead. A prefix
// ending in "/" forbids the packages below it too.
var forbiddenDeps = []string{
	"k8s.io/client-go/kubernetes",
	"k8s.io/client-go/kubernetes/", // scheme, typed/..., fake
	"k8s.io/client-go/informers",
	"k8s.io/client-go/informers/",
	"k8s.io/client-go/listers/",
	"k8s.io/client-go/applyconfigurations/",
	"k8s.io/client-go/discovery",
	"k8s.io/client-go/discovery/",
	"k8s.io/client-go/dynamic",
	"k8s.io/client-go/dynamic/",
	"k8s.io/client-go/openapi",
	"k8s.io/client-go/gentype",
	"k8s.io/client-go/testing",
	"k8s.io/client-go/tools/leaderelection",
	"k8s.io/client-go/tools/leaderelection/",
	"k8s.io/client-go/tools/record", // record/util (event names) is fine
	"k8s.io/client-go/tools/events",
	"k8s.io/apimachinery/pkg/util/strategicpatch",
	"k8s.io/kube-openapi/pkg/util/proto",
	"github.com/google/gnostic-models/",
	"k8s.io/cli-runtime/",
	"sigs.k8s.io/controller-runtime",
	"sigs.k8s.io/controller-runtime/",
	"github.com/elector-sidecar/elector-sidecar/pkg/kubeclient/clientset",
}

// allowedAPIGroups are the only k8s.io/api packages the sidecar needs:
// Leases, and Pods and Events. Each further group adds its types.
var allowedAPIGroups = []string{"k8s.io/api/coordination/v1", "k8s.io/api/core/v1"}

func forbidden(pkg string) bool {
	for _, f := range forbiddenDeps {
		if pkg == f || (strings.HasSuffix(f, "/") && strings.HasPrefix(pkg, f)) {
			return true
		}
	}
	return strings.HasPrefix(pkg, "k8s.io/api/") && !slices.Contains(allowedAPIGroups, pkg)
}

func TestSidecarBinaryLinksNoClientset(t *testing.T) {
	// As the image builds it (CGO_ENABLED=0); the package is this directory.
	imports := map[string][]string{}
	var deps []string // dependencies first, the main package last
	for _, line := range testsupport.GoListDeps(t, ".", "{{.ImportPath}}:{{join .Imports \" \"}}") {
		pkg, imps, _ := strings.Cut(line, ":")
		deps = append(deps, pkg)
		imports[pkg] = strings.Fields(imps)
	}
	// The check means something only if the list is the real one.
	for _, want := range []string{"github.com/elector-sidecar/elector-sidecar/pkg/kubeclient", "k8s.io/client-go/rest", "k8s.io/api/coordination/v1"} {
		if !slices.Contains(deps, want) {
			t.Fatalf("go list -deps does not list %s; got %d packages:\n%s", want, len(deps), strings.Join(deps, "\n"))
		}
	}
	// Report the forbidden packages that an allowed package imports (the
	// way in), each with its import chain from main; the rest follow.
	var all []string
	for _, pkg := range deps {
		if forbidden(pkg) {
			all = append(all, pkg)
		}
	}
	if len(all) == 0 {
		return
	}
	chains := importChains(deps[len(deps)-1], imports)
	var entries []string
	for _, pkg := range all {
		if c := chains[pkg]; len(c) > 1 && !forbidden(c[len(c)-2]) {
			entries = append(entries, "  "+strings.Join(c, "\n    -> "))
		}
	}
	t.Errorf("the sidecar binary links %d forbidden packages (client-go's clientset, tools/record or a further API group; the sidecar uses pkg/kubeclient), entering here:\n%s\nall of them: %s",
		len(all), strings.Join(entries, "\n"), strings.Join(all, " "))
}

// importChains returns, for every package reachable from root, a shortest
// import chain root -> ... -> package.
func importChains(root string, imports map[string][]string) map[string][]string {
	chains := map[string][]string{root: {root}}
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, imp := range imports[p] {
			if _, seen := chains[imp]; !seen {
				chains[imp] = append(slices.Clone(chains[p]), imp)
				queue = append(queue, imp)
			}
		}
	}
	return chains
}

// testOnlyModules are modules that only the tests, the bench and the local
// cluster use. They belong to the test module (test/go.mod) or hack/'s tool
// modules; the root module, which users import and the image builds, must not
// need them (issue 13).
var testOnlyModules = []string{
	"sigs.k8s.io/controller-runtime", // envtest
	"gonum.org/v1/plot",              // the bench's plots
	"helm.sh/helm/v4",                // test/chart
	"github.com/google/go-containerregistry",
	"github.com/moby/buildkit",
}

func TestRootModuleNeedsNoTestOnlyModule(t *testing.T) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Path}}", "all")
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list -m all: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list -m all: %v", err)
	}
	mods := strings.Fields(string(out))
	// The check means something only if the list is the real one.
	for _, want := range []string{"github.com/elector-sidecar/elector-sidecar", "k8s.io/client-go", "go.uber.org/goleak"} {
		if !slices.Contains(mods, want) {
			t.Fatalf("go list -m all does not list %s: the check is not looking at the root module's build list", want)
		}
	}
	for _, m := range mods {
		for _, bad := range testOnlyModules {
			if m == bad || strings.HasPrefix(m, bad+"/") {
				t.Errorf("the root module's build list has %s: move what needs it under test/ (the test module)", m)
			}
		}
	}
}
