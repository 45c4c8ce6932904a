package main

import (
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSBOMListsTheBinarysModulesAndIsReproducible: the SPDX document names the artefact with its SHA-256, the
// Go toolchain and every module of the binary's build information, and two runs write the same bytes.
func TestSBOMListsTheBinarysModulesAndIsReproducible(t *testing.T) {
	// A Go binary with module dependencies: this module's mkimage (go-containerregistry and more).
	exe := filepath.Join(t.TempDir(), "mkimage")
	cmd := exec.Command("go", "build", "-o", exe, "../mkimage") // the configuration go test built its packages in: no recompile
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	info, err := buildinfo.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	outs := []string{filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")}
	for _, out := range outs {
		if err := run([]string{"--artefact", exe, "--name", "elector-sidecar-linux-amd64", "--version", "0.2.0",
			"--binary", exe + "=/elector-sidecar", "--out", out}, "1700000000", io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	a, _ := os.ReadFile(outs[0])
	b, _ := os.ReadFile(outs[1])
	if !bytes.Equal(a, b) {
		t.Fatal("two runs wrote different documents")
	}
	var doc Document
	if err := json.Unmarshal(a, &doc); err != nil {
		t.Fatal(err)
	}
	sum, _ := fileSHA256(exe)
	if doc.SPDXVersion != "SPDX-2.3" || doc.CreationInfo.Created != "2023-11-14T22:13:20Z" || !strings.HasSuffix(doc.DocumentNamespace, sum) {
		t.Errorf("document header %+v %+v", doc.SPDXVersion, doc.CreationInfo)
	}
	if top := doc.Packages[0]; top.Name != "elector-sidecar-linux-amd64" || top.Checksums[0].Value != sum || top.LicenseDeclared != "Apache-2.0" {
		t.Errorf("artefact package %+v", top)
	}
	names := map[string]string{}
	for _, p := range doc.Packages {
		names[p.Name] = p.VersionInfo
	}
	if names["/elector-sidecar"] != "0.2.0" || names["stdlib"] != info.GoVersion {
		t.Errorf("packages %v: want /elector-sidecar 0.2.0 and stdlib %s", names, info.GoVersion)
	}
	if len(info.Deps) < 3 {
		t.Fatal("the test binary has no dependencies to check")
	}
	for _, d := range info.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		if names[d.Path] != d.Version {
			t.Errorf("module %s %s missing (have %q)", d.Path, d.Version, names[d.Path])
		}
	}
}

func TestSBOMRejectsBadInputClearly(t *testing.T) {
	dir := t.TempDir()
	notGo := filepath.Join(dir, "chart.tgz")
	if err := os.WriteFile(notGo, []byte("not a binary"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args  []string
		epoch string
		want  string
	}{
		{[]string{"--artefact", notGo}, "1", "--artefact and --version are required"},
		{[]string{"--artefact", notGo, "--version", "0.2.0"}, "", "no creation time"},
		{[]string{"--artefact", notGo, "--version", "0.2.0"}, "yesterday", `SOURCE_DATE_EPOCH="yesterday"`},
		{[]string{"--artefact", notGo, "--version", "0.2.0", "--binary", notGo}, "1", "no Go build information"},
		{[]string{"--artefact", filepath.Join(dir, "missing"), "--version", "0.2.0"}, "1", "artefact:"},
	} {
		if err := run(tt.args, tt.epoch, io.Discard); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v (SOURCE_DATE_EPOCH=%q): %v, want %q", tt.args, tt.epoch, err, tt.want)
		}
	}
	// A chart (no binaries) is fine: the artefact alone.
	if err := run([]string{"--artefact", notGo, "--version", "0.2.0", "--out", filepath.Join(dir, "c.json")}, "1", io.Discard); err != nil {
		t.Errorf("artefact without binaries: %v", err)
	}
}
