package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cacheBin is where hack/build-binaries.sh --cluster puts containerd, ctr and runc. hack/tools is its
// own module without a dependency on the root module, so this repeats test/framework.CacheBinDir's
// rule (and hack/lib.sh's ELECTOR_CACHE); keep the three the same.
func cacheBin() string {
	dir := os.Getenv("ELECTOR_CACHE_DIR")
	if dir == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, _ := os.UserHomeDir()
			base = filepath.Join(home, ".cache")
		}
		dir = filepath.Join(base, "elector-sidecar")
	}
	return filepath.Join(dir, "bin")
}

// containerd is a throwaway containerd (own root, state and socket) for import tests.
type containerd struct {
	bin, sock string
}

// containerdMissing says why startContainerd cannot run here ("" if it can).
func containerdMissing() string {
	if os.Geteuid() != 0 {
		return "containerd needs root"
	}
	for _, b := range []string{"containerd", "ctr", "runc", "containerd-shim-runc-v2"} {
		if _, err := os.Stat(filepath.Join(cacheBin(), b)); err != nil {
			return fmt.Sprintf("%s not in %s (hack/build-binaries.sh --cluster builds it)", b, cacheBin())
		}
	}
	return ""
}

func startContainerd(t *testing.T) *containerd {
	t.Helper()
	if why := containerdMissing(); why != "" {
		t.Skip(why)
	}
	bin := cacheBin()
	dir, err := os.MkdirTemp("", "mkimage-containerd-")
	if err != nil {
		t.Fatal(err)
	}
	c := &containerd{bin: bin, sock: filepath.Join(dir, "containerd.sock")}
	cfg := fmt.Sprintf("version = 3\nroot = %q\nstate = %q\n[grpc]\n  address = %q\n", filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.sock)
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bin, "containerd"), "--config", filepath.Join(dir, "config.toml"))
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = log.Close()
		// Snapshots may still be mounted if a container did not clean up.
		_ = exec.Command("umount", "-R", filepath.Join(dir, "root")).Run()
		if t.Failed() {
			if b, err := os.ReadFile(log.Name()); err == nil {
				t.Logf("containerd log:\n%s", tail(string(b), 40))
			}
		}
		_ = os.RemoveAll(dir)
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := c.ctr("version"); err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatal("containerd did not come up within 60s")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	l := strings.Split(s, "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// ctr runs ctr against this containerd in the k8s.io namespace (where kubelet's images live).
func (c *containerd) ctr(args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(c.bin, "ctr"), append([]string{"-a", c.sock, "-n", "k8s.io"}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+c.bin+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	var keep []string
	for _, l := range strings.Split(string(out), "\n") {
		if !strings.Contains(l, "DEPRECATION") {
			keep = append(keep, l)
		}
	}
	return strings.TrimSpace(strings.Join(keep, "\n")), err
}

// TestContainerdImportAndRun imports an mkimage tarball the way `kind load image-archive` does
// (ctr images import --all-platforms --digests into k8s.io) and runs its entrypoint with runc as the
// image's user.
func TestContainerdImportAndRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts containerd")
	}
	c := startContainerd(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "hello")
	buildStatic(t, ".", "./testdata/hello", bin, "-s -w")
	out := filepath.Join(dir, "image.tar")
	if err := run([]string{"--file", bin + ":/hello", "--dir", "/tmp:1777", "--entrypoint", "/hello", "--user", "65532:65532",
		"--tag", "hello:ctr-test", "--out", out}, io.Discard); err != nil {
		t.Fatal(err)
	}
	if got, err := c.ctr("images", "import", "--all-platforms", "--digests", out); err != nil {
		t.Fatalf("ctr images import: %v\n%s", err, got)
	}
	ls, err := c.ctr("images", "ls", "-q")
	if err != nil || !strings.Contains(ls, "docker.io/library/hello:ctr-test") {
		t.Fatalf("ctr images ls: %v\n%s", err, ls)
	}
	got, err := c.ctr("run", "--rm", "docker.io/library/hello:ctr-test", "mkimage-test", "/hello", "--version")
	if err != nil || got != "hello test-version" {
		t.Fatalf("ctr run: %v\n%q", err, got)
	}
	// The image's user applies: the process runs as 65532:65532, not root.
	got, err = c.ctr("run", "--rm", "docker.io/library/hello:ctr-test", "mkimage-test-id", "/hello", "--id")
	if err != nil || got != "uid=65532 gid=65532" {
		t.Fatalf("ctr run --id: %v\n%q", err, got)
	}
}
