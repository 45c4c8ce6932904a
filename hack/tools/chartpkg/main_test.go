package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func writeChart(t *testing.T, version string) string {
	t.Helper()
	dir := t.TempDir()
	for p, c := range map[string]string{
		"Chart.yaml":             "apiVersion: v2\nname: demo\nversion: " + version + "\nappVersion: \"" + version + "\"\n",
		"values.yaml":            "a: 1\n",
		"templates/cm.yaml":      "kind: ConfigMap\n",
		"templates/tests/t.yaml": "kind: Pod\n",
		".helmignore":            "*.orig\nci/\n",
		"x.orig":                 "ignored",
		"ci/values.yaml":         "ignored",
	} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestPackageIsReproducibleAndLaidOutAsHelmPackage: NAME-VERSION.tgz with NAME/... entries, .helmignore applied,
// and the same bytes from two runs, also when the files' own mtimes differ.
func TestPackageIsReproducibleAndLaidOutAsHelmPackage(t *testing.T) {
	dir := writeChart(t, "0.2.0")
	var outs [][]byte
	for i := range 2 {
		out := t.TempDir()
		if i == 1 {
			_ = os.Chtimes(filepath.Join(dir, "values.yaml"), time.Now(), time.Now())
		}
		if err := run([]string{"--chart", dir, "--version", "0.2.0", "--out-dir", out}, "1700000000", io.Discard, io.Discard); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(out, "demo-0.2.0.tgz"))
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, b)
	}
	if !bytes.Equal(outs[0], outs[1]) {
		t.Fatal("two packages of the same chart differ")
	}
	gz, err := gzip.NewReader(bytes.NewReader(outs[0]))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.ModTime.Unix() != 1700000000 || h.Uid != 0 {
			t.Errorf("%s: mtime %v uid %d", h.Name, h.ModTime, h.Uid)
		}
		names = append(names, h.Name)
	}
	want := []string{"demo/.helmignore", "demo/Chart.yaml", "demo/templates/cm.yaml", "demo/templates/tests/t.yaml", "demo/values.yaml"}
	if !slices.Equal(names, want) {
		t.Errorf("entries %v, want %v", names, want)
	}
}

func TestPackageRefusesAVersionThatIsNotTheCharts(t *testing.T) {
	dir := writeChart(t, "0.1.0")
	err := run([]string{"--chart", dir, "--version", "0.2.0", "--out-dir", t.TempDir()}, "1", io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `Chart.yaml version is "0.1.0", not "0.2.0"`) {
		t.Errorf("err %v", err)
	}
	if err := run([]string{"--chart", dir, "--version", "0.1.0"}, "", io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "no mtime") {
		t.Errorf("without SOURCE_DATE_EPOCH: %v", err)
	}
}
