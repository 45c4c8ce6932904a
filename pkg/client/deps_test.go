package client_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/elector-sidecar/elector-sidecar/internal/testsupport"
)

// goListDeps lists the packages the package in dir links (not its tests),
// as an app's build does, each with whether it is in the standard library.
func goListDeps(t *testing.T, dir string) map[string]bool {
	t.Helper()
	deps := map[string]bool{}
	for _, line := range testsupport.GoListDeps(t, dir, "{{.ImportPath}} {{.Standard}}") {
		pkg, std, _ := strings.Cut(line, " ")
		deps[pkg] = std == "true"
	}
	return deps
}

// TestClientImportsNoKubernetesModule: an app that imports pkg/client gets
// the standard library, pkg/api and pkg/fencing, and no k8s.io or
// sigs.k8s.io package (it pulled in 95 through pkg/localapi and
// pkg/election).
func TestClientImportsNoKubernetesModule(t *testing.T) {
	deps := goListDeps(t, ".")
	// The check means something only if the list is the real one.
	for _, want := range []string{"github.com/elector-sidecar/elector-sidecar/pkg/client", "github.com/elector-sidecar/elector-sidecar/pkg/api", "net/http"} {
		if _, ok := deps[want]; !ok {
			t.Fatalf("go list -deps does not list %s; got %v", want, deps)
		}
	}
	allowed := []string{
		"github.com/elector-sidecar/elector-sidecar/pkg/client",
		"github.com/elector-sidecar/elector-sidecar/pkg/api",
		"github.com/elector-sidecar/elector-sidecar/pkg/fencing",
	}
	var bad []string
	for pkg, std := range deps {
		if !std && !slices.Contains(allowed, pkg) {
			bad = append(bad, pkg)
		}
	}
	slices.Sort(bad)
	if len(bad) > 0 {
		t.Fatalf("pkg/client links %d packages beyond the standard library, pkg/api and pkg/fencing (want no k8s.io module): %s", len(bad), strings.Join(bad, " "))
	}
}

// TestAPIImportsOnlyTheStandardLibrary: pkg/api, the wire types shared by
// the sidecar and its clients, stays dependency-free.
func TestAPIImportsOnlyTheStandardLibrary(t *testing.T) {
	deps := goListDeps(t, "../api")
	if _, ok := deps["github.com/elector-sidecar/elector-sidecar/pkg/api"]; !ok {
		t.Fatalf("go list -deps ../api does not list pkg/api: %v", deps)
	}
	for pkg, std := range deps {
		if !std && pkg != "github.com/elector-sidecar/elector-sidecar/pkg/api" {
			t.Errorf("pkg/api links %s", pkg)
		}
	}
}
