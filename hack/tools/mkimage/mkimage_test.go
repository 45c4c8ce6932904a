package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// buildStatic builds a static Go binary of pkg (run from dir) into out.
func buildStatic(t *testing.T, dir, pkg, out string, ldflags string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
}

// imageFiles extracts the image's flattened filesystem: path -> header and content.
func imageFiles(t *testing.T, img v1.Image) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	hdrs, data := map[string]*tar.Header{}, map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading image filesystem: %v", err)
		}
		p := "/" + strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")
		hdrs[p] = h
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		data[p] = b
	}
	return hdrs, data
}

// dockerManifest is the manifest.json of a `docker save` tarball, as docker load and ctr import read it.
type dockerManifest []struct {
	Config   string
	RepoTags []string
	Layers   []string
}

func readManifestJSON(t *testing.T, path string) dockerManifest {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	names := map[string]bool{}
	var m dockerManifest
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names[h.Name] = true
		if h.Name == "manifest.json" {
			if err := json.NewDecoder(tr).Decode(&m); err != nil {
				t.Fatalf("manifest.json: %v", err)
			}
		}
	}
	if len(m) != 1 {
		t.Fatalf("manifest.json: want 1 image, got %d", len(m))
	}
	for _, n := range append([]string{m[0].Config}, m[0].Layers...) {
		if !names[n] {
			t.Errorf("manifest.json names %s, which is not in the tarball", n)
		}
	}
	return m
}

// CheckImage verifies an image tarball and runs the binary at runPath with args, returning its output.
func checkImage(t *testing.T, tarPath, tag string, wantCfg v1.Config, runPath string, runArgs ...string) string {
	t.Helper()
	m := readManifestJSON(t, tarPath)
	if !reflect.DeepEqual(m[0].RepoTags, []string{tag}) {
		t.Errorf("RepoTags = %v, want [%s]", m[0].RepoTags, tag)
	}
	img, err := tarball.ImageFromPath(tarPath, nil)
	if err != nil {
		t.Fatalf("reading %s: %v", tarPath, err)
	}
	// Digests, diff IDs and sizes all agree (what registries and containerd check on import).
	if err := validate.Image(img); err != nil {
		t.Fatalf("validate: %v", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("platform = %s/%s, want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
	}
	if cf.Config.User != wantCfg.User {
		t.Errorf("User = %q, want %q", cf.Config.User, wantCfg.User)
	}
	if !reflect.DeepEqual(cf.Config.Entrypoint, wantCfg.Entrypoint) {
		t.Errorf("Entrypoint = %q, want %q", cf.Config.Entrypoint, wantCfg.Entrypoint)
	}
	for k, v := range wantCfg.Labels {
		if got := cf.Config.Labels[k]; got != v {
			t.Errorf("label %s = %q, want %q", k, got, v)
		}
	}

	hdrs, data := imageFiles(t, img)
	if h := hdrs["/tmp"]; h == nil || h.Typeflag != tar.TypeDir || h.Mode&01777 != 01777 {
		t.Errorf("/tmp: want a directory with mode 1777, got %+v", h)
	}
	h := hdrs[runPath]
	if h == nil {
		t.Fatalf("%s not in the image", runPath)
	}
	if h.Mode&0o755 != 0o755 || h.Uid != 0 {
		t.Errorf("%s: mode %o uid %d, want 0755 root-owned (readable and executable by 65532)", runPath, h.Mode, h.Uid)
	}
	bin := filepath.Join(t.TempDir(), filepath.Base(runPath))
	if err := os.WriteFile(bin, data[runPath], 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, runArgs...).CombinedOutput()
	if err != nil {
		t.Fatalf("running %s %v from the image: %v\n%s", runPath, runArgs, err, out)
	}
	return string(out)
}

func TestBuildRunsInImage(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "hello")
	buildStatic(t, ".", "./testdata/hello", bin, "-s -w")
	cfgFile := filepath.Join(dir, "config.txt")
	if err := os.WriteFile(cfgFile, []byte("x=1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out", "image.tar")
	err := run([]string{
		"--file", bin + ":/hello",
		"--file", cfgFile + ":/etc/app/config.txt:0644",
		"--dir", "/tmp:1777",
		"--entrypoint", "/hello",
		"--user", "65532:65532",
		"--label", "org.opencontainers.image.title=hello",
		"--label", "org.opencontainers.image.version=v0.0.1",
		"--tag", "hello:v0.0.1",
		"--out", out,
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	got := checkImage(t, out, "hello:v0.0.1", v1.Config{
		User:       "65532:65532",
		Entrypoint: []string{"/hello"},
		Labels:     map[string]string{"org.opencontainers.image.title": "hello", "org.opencontainers.image.version": "v0.0.1"},
	}, "/hello", "--version")
	if strings.TrimSpace(got) != "hello test-version" {
		t.Errorf("output = %q", got)
	}

	// Parent directories are created; the non-executable file keeps the given mode.
	img, err := tarball.ImageFromPath(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	hdrs, data := imageFiles(t, img)
	for _, d := range []string{"/etc", "/etc/app"} {
		if h := hdrs[d]; h == nil || h.Typeflag != tar.TypeDir {
			t.Errorf("%s: want a directory", d)
		}
	}
	if h := hdrs["/etc/app/config.txt"]; h == nil || h.Mode != 0o644 || string(data["/etc/app/config.txt"]) != "x=1\n" {
		t.Errorf("/etc/app/config.txt: %+v %q", h, data["/etc/app/config.txt"])
	}

	// Reproducible: the same inputs give the same image digest.
	out2 := filepath.Join(dir, "image2.tar")
	if err := run([]string{"--file", bin + ":/hello", "--file", cfgFile + ":/etc/app/config.txt:0644", "--dir", "/tmp:1777",
		"--entrypoint", "/hello", "--user", "65532:65532", "--label", "org.opencontainers.image.title=hello",
		"--label", "org.opencontainers.image.version=v0.0.1", "--tag", "hello:v0.0.1", "--out", out2}, io.Discard); err != nil {
		t.Fatal(err)
	}
	img2, err := tarball.ImageFromPath(out2, nil)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := img.Digest()
	d2, _ := img2.Digest()
	if d1 != d2 {
		t.Errorf("not reproducible: %s != %s", d1, d2)
	}
}

func TestBadFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no out", []string{"--file", "a:/a", "--tag", "x:y"}, "--out is required"},
		{"no tag", []string{"--file", "a:/a", "--out", "o.tar"}, "--tag is required"},
		{"relative dst", []string{"--file", "a:b", "--tag", "x:y", "--out", "o.tar"}, "must be absolute"},
		{"bad mode", []string{"--file", "a:/a:999", "--tag", "x:y", "--out", "o.tar"}, "octal"},
		{"bad label", []string{"--file", "a:/a", "--label", "nolabel", "--tag", "x:y", "--out", "o.tar"}, "key=value"},
		{"missing src", []string{"--file", "/does/not/exist:/a", "--tag", "x:y", "--out", "o.tar"}, "no such file"},
		{"bad tag", []string{"--file", "a:/a", "--tag", "UPPER:y", "--out", "o.tar"}, "--tag"},
		{"bad created", []string{"--file", "a:/a", "--tag", "x:y", "--created", "yesterday", "--out", "o.tar"}, "--created"},
		{"dir owner by name", []string{"--dir", "/home/nonroot:0700:nonroot:nonroot", "--tag", "x:y", "--out", "o.tar"}, "want numeric uid:gid"},
		{"dir owner without gid", []string{"--dir", "/home/nonroot:0700:65532", "--tag", "x:y", "--out", "o.tar"}, "want path[:mode[:uid:gid]]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "a"), []byte("a"), 0o644); err != nil {
				t.Fatal(err)
			}
			wd, _ := os.Getwd()
			t.Cleanup(func() { _ = os.Chdir(wd) })
			if err := os.Chdir(dir); err != nil {
				t.Fatal(err)
			}
			var stderr bytes.Buffer
			err := run(tt.args, &stderr)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestDirOwner: --dir path:mode:uid:gid gives the directory that owner (a home the image's user can
// write to); its parents and every file stay root's.
func TestDirOwner(t *testing.T) {
	d, err := parseDir("/home/nonroot:0700:65532:65532")
	if err != nil {
		t.Fatal(err)
	}
	b, err := layerTar(nil, []DirEntry{d}, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = fmt.Sprintf("%o %d:%d", h.Mode, h.Uid, h.Gid)
	}
	want := map[string]string{"home/": "755 0:0", "home/nonroot/": "700 65532:65532"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("layer = %v, want %v", got, want)
	}
}
