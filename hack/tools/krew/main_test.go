package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func releaseDir(t *testing.T) (dir, license string) {
	t.Helper()
	dir = t.TempDir()
	for _, arch := range []string{"amd64", "arm64"} {
		if err := os.WriteFile(filepath.Join(dir, "kubectl-elector-1.2.3-linux-"+arch), []byte("binary for "+arch), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	license = filepath.Join(t.TempDir(), "LICENSE")
	if err := os.WriteFile(license, []byte("Apache License 2.0"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, license
}

func readTarGz(t *testing.T, b []byte) map[string]*tar.Header {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if zr.Name != "" || !zr.ModTime.IsZero() {
		t.Errorf("gzip header name %q mtime %v, want neither", zr.Name, zr.ModTime)
	}
	tr := tar.NewReader(zr)
	out := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		h.PAXRecords = map[string]string{"body": string(body)}
		out[h.Name] = h
	}
}

// TestManifestPointsAtReproducibleArchives: the manifest names one archive per arch with its release URL and
// the sha256 of the archive written next to it; each archive holds the arch's binary as kubectl-elector
// (0755) and the LICENSE, stamped with SOURCE_DATE_EPOCH; a second run writes the same bytes.
func TestManifestPointsAtReproducibleArchives(t *testing.T) {
	dir, license := releaseDir(t)
	args := []string{"--version", "1.2.3", "--dir", dir, "--license", license}
	if err := run(args, "1700000000", io.Discard); err != nil {
		t.Fatal(err)
	}
	m, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kind: Plugin\n", "  name: elector\n", "  version: v1.2.3\n", "    bin: kubectl-elector\n"} {
		if !strings.Contains(string(m), want) {
			t.Errorf("manifest lacks %q:\n%s", want, m)
		}
	}
	platforms := regexp.MustCompile(`(?m)^        arch: (\S+)\n    uri: (\S+)\n    sha256: ([0-9a-f]{64})$`).FindAllStringSubmatch(string(m), -1)
	if len(platforms) != 2 {
		t.Fatalf("%d platforms, want amd64 and arm64:\n%s", len(platforms), m)
	}
	archives := map[string][]byte{}
	for i, arch := range []string{"amd64", "arm64"} {
		p := platforms[i]
		name := "kubectl-elector-1.2.3-linux-" + arch + ".tar.gz"
		if p[1] != arch || p[2] != "https://github.com/elector-sidecar/elector-sidecar/releases/download/v1.2.3/"+name {
			t.Errorf("platform %d: arch %s uri %s", i, p[1], p[2])
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		archives[name] = b
		if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != p[3] {
			t.Errorf("%s: manifest sha256 %s, the archive's is %x", name, p[3], sum)
		}
		entries := readTarGz(t, b)
		bin, lic := entries["kubectl-elector"], entries["LICENSE"]
		if len(entries) != 2 || bin == nil || lic == nil {
			t.Fatalf("%s holds %v, want kubectl-elector and LICENSE", name, entries)
		}
		if bin.PAXRecords["body"] != "binary for "+arch || bin.Mode != 0o755 || lic.PAXRecords["body"] != "Apache License 2.0" || lic.Mode != 0o644 {
			t.Errorf("%s: kubectl-elector %q %o, LICENSE %q %o", name, bin.PAXRecords["body"], bin.Mode, lic.PAXRecords["body"], lic.Mode)
		}
		if !bin.ModTime.Equal(time.Unix(1700000000, 0)) || bin.Uid != 0 || bin.Gid != 0 {
			t.Errorf("%s: mtime %v uid %d gid %d, want SOURCE_DATE_EPOCH and 0:0", name, bin.ModTime, bin.Uid, bin.Gid)
		}
	}
	if err := run(args, "1700000000", io.Discard); err != nil {
		t.Fatal(err)
	}
	for name, first := range archives {
		if again, _ := os.ReadFile(filepath.Join(dir, name)); !bytes.Equal(first, again) {
			t.Errorf("%s differs between two runs", name)
		}
	}
	if again, _ := os.ReadFile(filepath.Join(dir, ManifestName)); !bytes.Equal(m, again) {
		t.Errorf("the manifest differs between two runs")
	}
}

func TestRefusesWhatWouldMakeABadManifest(t *testing.T) {
	dir, license := releaseDir(t)
	for _, tc := range []struct {
		args  []string
		epoch string
		want  string
	}{
		{[]string{"--version", "1.2.3", "--dir", dir, "--license", license}, "", "SOURCE_DATE_EPOCH is not set"},
		{[]string{"--version", "v1.2.3", "--dir", dir, "--license", license}, "1", `--version "v1.2.3": want X.Y.Z`},
		{[]string{"--version", "1.2.3", "--dir", dir}, "1", "--version, --dir and --license are required"},
		{[]string{"--version", "1.2.3", "--dir", dir, "--license", license, "--arches", "riscv64"}, "1", "kubectl-elector-1.2.3-linux-riscv64: no such file"},
		{[]string{"--version", "1.2.3", "--dir", dir, "--license", license, "--arches", " "}, "1", "--arches is empty"},
	} {
		err := run(tc.args, tc.epoch, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v (epoch %q): %v, want %q", tc.args, tc.epoch, err, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, ManifestName)); !os.IsNotExist(err) {
		t.Errorf("a failed run left %s: %v", ManifestName, err)
	}
}
