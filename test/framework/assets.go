package framework

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// ControlPlaneBinaries are the binaries StartControlPlane needs in the assets directory.
var ControlPlaneBinaries = []string{"etcd", "kube-apiserver", "kubectl"}

// FixAssetsHint is the command that builds the control-plane binaries.
const FixAssetsHint = "run `hack/build-binaries.sh` from the repository root (builds etcd, kube-apiserver, kubectl and helm into the cache, about 6 minutes the first time), or point KUBEBUILDER_ASSETS at a directory that holds them"

var (
	rootOnce sync.Once
	rootDir  string
	rootErr  error
)

// RepoRoot returns the repository root: the nearest parent of the working
// directory that holds go.mod (tests run in their package directory, programs
// from the root).
func RepoRoot() (string, error) {
	rootOnce.Do(func() {
		dir, err := os.Getwd()
		if err != nil {
			rootErr = fmt.Errorf("repo root: %w", err)
			return
		}
		for {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				if _, err := os.Stat(filepath.Join(dir, "cmd", "elector-sidecar")); err == nil {
					rootDir = dir
					return
				}
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				rootErr = errors.New("repo root: no parent directory holds go.mod and cmd/elector-sidecar; run from inside the repository")
				return
			}
			dir = parent
		}
	})
	return rootDir, rootErr
}

// CacheDir is the project's cache of built binaries, wrapper modules and the
// local cluster, never in the repository: $ELECTOR_CACHE_DIR, else
// $XDG_CACHE_HOME/elector-sidecar, else ~/.cache/elector-sidecar. It is the
// Go twin of ELECTOR_CACHE in hack/lib.sh; keep the two rules the same.
func CacheDir() string {
	if dir := os.Getenv("ELECTOR_CACHE_DIR"); dir != "" {
		return dir
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, _ := os.UserHomeDir()
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "elector-sidecar")
}

// CacheBinDir is where hack/build-binaries.sh puts the binaries it builds
// (etcd, kube-apiserver, kubectl, helm; with --cluster also the node's).
func CacheBinDir() string { return filepath.Join(CacheDir(), "bin") }

// AssetsDir returns the directory that holds etcd, kube-apiserver and kubectl:
// $KUBEBUILDER_ASSETS if set, else the output of `hack/build-binaries.sh
// --print-dir`. It fails (never silently skips) if a binary is missing, with
// the command that fixes it.
func AssetsDir() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	source := "KUBEBUILDER_ASSETS"
	if dir == "" {
		root, err := RepoRoot()
		if err != nil {
			return "", err
		}
		script := filepath.Join(root, "hack", "build-binaries.sh")
		var stderr bytes.Buffer
		cmd := exec.Command(script, "--print-dir")
		cmd.Dir = root
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("control-plane binaries: `%s --print-dir` failed: %w (%s); %s", script, err, strings.TrimSpace(stderr.String()), FixAssetsHint)
		}
		dir = strings.TrimSpace(string(out))
		source = "hack/build-binaries.sh --print-dir"
	}
	var missing []string
	for _, b := range ControlPlaneBinaries {
		if st, err := os.Stat(filepath.Join(dir, b)); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("control-plane binaries %s missing in %s (from %s): %s", strings.Join(missing, ", "), dir, source, FixAssetsHint)
	}
	return dir, nil
}
