package framework

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
)

// Packages of the binaries the harness runs, relative to the repository root.
const (
	SidecarPackage   = "./cmd/elector-sidecar"
	DemoPackage      = "./test/cmd/elector-demo"
	CandidatePackage = "./test/cmd/clientgo-candidate"
)

var (
	buildMu    sync.Mutex
	buildDir   string
	builtPaths = map[string]string{}
)

// BinaryOverrideEnv maps a package to an environment variable that, when set,
// names a prebuilt binary to use instead of building the package (e.g. to
// test a release binary, or a patched core from another checkout).
var BinaryOverrideEnv = map[string]string{
	SidecarPackage:   "ELECTOR_SIDECAR_BINARY",
	DemoPackage:      "ELECTOR_DEMO_BINARY",
	CandidatePackage: "ELECTOR_CANDIDATE_BINARY",
}

// BuildBinaries builds each package (a path relative to the repository root,
// e.g. SidecarPackage) once per process into a temporary directory and returns
// package -> binary path. Later calls reuse earlier builds. CleanupBinaries
// removes the directory.
func BuildBinaries(pkgs ...string) (map[string]string, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	if buildDir == "" {
		d, err := os.MkdirTemp("", "elector-bins-")
		if err != nil {
			return nil, fmt.Errorf("build: %w", err)
		}
		buildDir = d
	}
	out := map[string]string{}
	for _, pkg := range pkgs {
		if p, ok := builtPaths[pkg]; ok {
			out[pkg] = p
			continue
		}
		if ev := BinaryOverrideEnv[pkg]; ev != "" && os.Getenv(ev) != "" {
			p := os.Getenv(ev)
			if _, err := os.Stat(p); err != nil {
				return nil, fmt.Errorf("%s=%s: %w", ev, p, err)
			}
			builtPaths[pkg] = p
			out[pkg] = p
			continue
		}
		bin := filepath.Join(buildDir, path.Base(pkg))
		cmd := GoBuildCommand(root, pkg, "-o", bin)
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build %s: %w\n%s", pkg, err, strings.TrimSpace(string(b)))
		}
		builtPaths[pkg] = bin
		out[pkg] = bin
	}
	return out, nil
}

// GoBuildCommand returns `go build FLAGS... PKG` for pkg, a path relative to
// the repository root (e.g. "./cmd/elector-sidecar"), run in the module that
// holds it: the root module, or the test module (test/go.mod) for packages
// under ./test/.
func GoBuildCommand(root, pkg string, flags ...string) *exec.Cmd {
	dir, rel := root, pkg
	if strings.HasPrefix(pkg, "./test/") {
		dir, rel = filepath.Join(root, "test"), "./"+strings.TrimPrefix(pkg, "./test/")
	}
	cmd := exec.Command("go", append(append([]string{"build"}, flags...), rel)...)
	cmd.Dir = dir
	return cmd
}

// BuildBinary builds one package (see BuildBinaries) and returns its path.
func BuildBinary(pkg string) (string, error) {
	m, err := BuildBinaries(pkg)
	if err != nil {
		return "", err
	}
	return m[pkg], nil
}

// CleanupBinaries removes the binaries built by BuildBinaries.
func CleanupBinaries() {
	buildMu.Lock()
	defer buildMu.Unlock()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	buildDir = ""
	builtPaths = map[string]string{}
}
