package main

import (
	"archive/tar"
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"encoding/pem"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/elector-sidecar/elector-sidecar/hack/tools/dockerfile"
)

const projectModule = "github.com/elector-sidecar/elector-sidecar"

// TestImageTarballMatchesDockerfile runs hack/image.sh (what `make image` runs) and compares the
// tarball with what the Dockerfile promises, as hack/tools/dockerfile evaluates it (the final stage's
// LABEL, USER, ENTRYPOINT, COPY and ARG lines, plus what its distroless base provides): the config
// (user, workdir, environment, entrypoint, cmd, labels, platform), the exact file list with modes and
// owners, /etc/passwd and /etc/group naming the image's user, the CA bundle, and each binary built from
// the package and with the -ldflags of the Dockerfile's build stage. Then the sidecar runs from the
// image (also in containerd, where it is built).
func TestImageTarballMatchesDockerfile(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	const version, revision = "v9.9.9-test", "0123abc"
	out := filepath.Join(t.TempDir(), "image.tar")
	cmd := exec.Command("bash", filepath.Join(root, "hack", "image.sh"))
	// hack/image.sh's defaults, apart from the version: no stray IMAGE, IMAGE_BINARIES, CA_CERTS, GOARCH.
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "VERSION", "REVISION", "OUT", "IMAGE", "IMAGE_BINARIES", "CA_CERTS", "GOARCH":
		default:
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "VERSION="+version, "REVISION="+revision, "OUT="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/image.sh: %v\n%s", err, b)
	}
	df, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := dockerfile.Expect(df, map[string]string{
		"VERSION": version, "REVISION": revision, "TARGETOS": "linux", "TARGETARCH": runtime.GOARCH,
	})
	if err != nil {
		t.Fatalf("evaluating the Dockerfile: %v", err)
	}

	// Config. checkImage also validates the tarball and runs the entrypoint's --version.
	got := checkImage(t, out, "elector-sidecar:"+version, v1.Config{User: want.User, Entrypoint: want.Entrypoint}, want.Entrypoint[0], "--version")
	if !strings.Contains(got, version) {
		t.Errorf("%s --version = %q, want it to contain %s", want.Entrypoint[0], got, version)
	}
	img, err := tarball.ImageFromPath(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.WorkingDir != want.WorkingDir {
		t.Errorf("WorkingDir = %q, Dockerfile: %q", c.WorkingDir, want.WorkingDir)
	}
	if !reflect.DeepEqual(c.Env, want.Env) {
		t.Errorf("Env = %q, Dockerfile: %q", c.Env, want.Env)
	}
	if len(c.Cmd) != 0 || len(want.Cmd) != 0 {
		if !reflect.DeepEqual(c.Cmd, want.Cmd) {
			t.Errorf("Cmd = %q, Dockerfile: %q", c.Cmd, want.Cmd)
		}
	}
	if !reflect.DeepEqual(c.Labels, want.Labels) {
		t.Errorf("Labels = %v\nDockerfile: %v", c.Labels, want.Labels)
	}

	// Files: exactly the Dockerfile's, with its modes and owners.
	hdrs, data := imageFiles(t, img)
	expected := map[string]dockerfile.File{}
	parents := map[string]bool{}
	for _, f := range want.Files {
		expected[f.Path] = f
		for d := path.Dir(f.Path); d != "/"; d = path.Dir(d) {
			parents[d] = true
		}
	}
	for p, h := range hdrs {
		if _, ok := expected[p]; ok || p == "/" {
			continue
		}
		if h.Typeflag != tar.TypeDir || !parents[p] {
			t.Errorf("%s is in the image but not in what the Dockerfile promises", p)
		}
	}
	ldflags := want.LDFlags["build"]
	if len(ldflags) != 1 {
		t.Fatalf("the Dockerfile's build stage has -ldflags %q, want exactly one value", ldflags)
	}
	for _, f := range want.Files {
		h := hdrs[f.Path]
		if h == nil {
			t.Errorf("%s: promised by the Dockerfile, missing from the image", f.Path)
			continue
		}
		if isDir := h.Typeflag == tar.TypeDir; isDir != f.Dir || (!isDir && h.Typeflag != tar.TypeReg) {
			t.Errorf("%s: tar type %q, want a directory: %v", f.Path, h.Typeflag, f.Dir)
		}
		wantMode := f.Mode
		if wantMode < 0 {
			wantMode = 0o755 // COPY keeps the mode go build gave the binary
		}
		if h.Mode&0o7777 != wantMode || h.Uid != f.UID || h.Gid != f.GID {
			t.Errorf("%s: mode %o owner %d:%d, want %o %d:%d", f.Path, h.Mode&0o7777, h.Uid, h.Gid, wantMode, f.UID, f.GID)
		}
		if f.Content != "" && string(data[f.Path]) != f.Content {
			t.Errorf("%s =\n%s\nwant\n%s", f.Path, data[f.Path], f.Content)
		}
		if f.Stage == "build" {
			checkBinary(t, f, data[f.Path], want.BuildRuns["build"], ldflags[0])
		}
	}

	// The user the image runs as is named in /etc/passwd and /etc/group.
	uid, gid, _ := strings.Cut(c.User, ":")
	if !hasEntry(string(data["/etc/passwd"]), 2, uid) {
		t.Errorf("user %s: no /etc/passwd entry:\n%s", uid, data["/etc/passwd"])
	}
	if gid != "" && !hasEntry(string(data["/etc/group"]), 2, gid) {
		t.Errorf("group %s: no /etc/group entry:\n%s", gid, data["/etc/group"])
	}
	if !strings.Contains(string(data["/etc/nsswitch.conf"]), "\n"+dockerfile.NonrootNsswitchHosts+"\n") {
		t.Errorf("/etc/nsswitch.conf has no %q line:\n%s", dockerfile.NonrootNsswitchHosts, data["/etc/nsswitch.conf"])
	}
	// The CA bundle: this machine's Debian ca-certificates bundle, every block a certificate.
	certs := data["/etc/ssl/certs/ca-certificates.crt"]
	host, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(certs, host) {
		t.Errorf("/etc/ssl/certs/ca-certificates.crt (%d bytes) is not this machine's bundle (%d bytes)", len(certs), len(host))
	}
	n := 0
	for rest := certs; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			t.Errorf("CA bundle: a %q block", b.Type)
		}
		n++
	}
	if n < 50 {
		t.Errorf("CA bundle has %d certificates, want a full root set", n)
	}
	t.Logf("image: %d paths, %d CA certificates, labels %v", len(hdrs), n, c.Labels)

	// Where containerd is built, load it like `kind load image-archive` and run it with runc.
	if why := containerdMissing(); why != "" {
		t.Logf("not loading into containerd: %s", why)
		return
	}
	ctrd := startContainerd(t)
	ref := "docker.io/library/elector-sidecar:" + version
	if got, err := ctrd.ctr("images", "import", "--all-platforms", "--digests", out); err != nil {
		t.Fatalf("ctr images import: %v\n%s", err, got)
	}
	got, err = ctrd.ctr("run", "--rm", ref, "elector-version", "/elector-sidecar", "--version")
	if err != nil || !strings.Contains(got, version) {
		t.Errorf("ctr run elector-sidecar --version: %v\n%s", err, got)
	}
	// Without flags the entrypoint exits 2 naming the missing flag.
	got, err = ctrd.ctr("run", "--rm", ref, "elector-noflags")
	if err == nil || !strings.Contains(got, "lease-name") {
		t.Errorf("ctr run elector-sidecar (no flags): %v\n%s", err, got)
	}
}

// checkBinary: the image's binary f is the Go package the Dockerfile's build stage builds into
// f.Source (go build -o /out/<package basename>), static, -trimpath, with the stage's -ldflags.
func checkBinary(t *testing.T, f dockerfile.File, bin []byte, buildRun, ldflags string) {
	t.Helper()
	bi, err := buildinfo.Read(bytes.NewReader(bin))
	if err != nil {
		t.Errorf("%s: reading its Go build info: %v", f.Path, err)
		return
	}
	pkg := strings.TrimPrefix(bi.Path, projectModule+"/")
	// The RUN names the package from the root module ("./cmd/x"), or as MODULE_DIR:./PATH for a package
	// of a nested module ("test:./cmd/elector-demo", built with go -C test).
	named := strings.Contains(buildRun, "./"+pkg)
	if mod, rest, ok := strings.Cut(pkg, "/"); ok && bi.Main.Path == projectModule+"/"+mod {
		named = strings.Contains(buildRun, mod+":./"+rest)
	}
	if pkg == bi.Path || !named || path.Base(pkg) != path.Base(f.Source) {
		t.Errorf("%s is %s; the Dockerfile builds %s from a package named in its RUN:\n%s", f.Path, bi.Path, f.Source, buildRun)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	for k, v := range map[string]string{"CGO_ENABLED": "0", "-trimpath": "true", "GOOS": "linux", "GOARCH": runtime.GOARCH} {
		if settings[k] != v {
			t.Errorf("%s: built with %s=%q, the Dockerfile: %q", f.Path, k, settings[k], v)
		}
	}
	// go build leaves -ldflags out of the build info with -trimpath: check their effects instead.
	ef, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		t.Errorf("%s: %v", f.Path, err)
		return
	}
	args := strings.Fields(ldflags)
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-s":
			if ef.Section(".symtab") != nil {
				t.Errorf("%s has a symbol table; the Dockerfile links with -s", f.Path)
			}
		case a == "-w":
			if ef.Section(".debug_info") != nil || ef.Section(".zdebug_info") != nil {
				t.Errorf("%s has DWARF; the Dockerfile links with -w", f.Path)
			}
		case a == "-X" && i+1 < len(args):
			i++
			name, value, _ := strings.Cut(args[i], "=")
			// -X is a no-op for a binary that does not link the variable's package (go-worker and
			// elector-demo do not use pkg/version); the function table names every package linked.
			if pkg := name[:strings.LastIndex(name, ".")+1]; !bytes.Contains(bin, []byte(pkg)) {
				continue
			}
			if !bytes.Contains(bin, []byte(value)) {
				t.Errorf("%s does not contain %q; the Dockerfile links with -X %s=%s", f.Path, value, name, value)
			}
		default:
			t.Errorf("the Dockerfile's -ldflags has %q, which this test cannot check: teach checkBinary", a)
		}
	}
}

// hasEntry: a line of an /etc/passwd or /etc/group file has value in its field'th (0-based) field.
func hasEntry(file string, field int, value string) bool {
	for _, l := range strings.Split(file, "\n") {
		if fs := strings.Split(l, ":"); len(fs) > field && fs[field] == value {
			return true
		}
	}
	return false
}
