package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// untar extracts the tarball at path into a new directory.
func untar(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	dir := t.TempDir()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return dir
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOCILayoutIsValidNamedAndReproducible: --format oci writes an OCI image layout that go-containerregistry
// reads back as a valid image with OCI media types, the platform and both name annotations per tag, and the
// same inputs give the same bytes (what `make release` relies on for identical checksums).
func TestOCILayoutIsValidNamedAndReproducible(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "hello")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := func(out string) Spec {
		return Spec{
			Files: []FileEntry{{Src: bin, Dst: "/hello"}}, Dirs: []DirEntry{{Path: "/tmp", Mode: 0o1777}},
			Entrypoint: []string{"/hello"}, User: "65532:65532", OS: "linux", Arch: "arm64",
			Labels: map[string]string{"org.opencontainers.image.version": "0.2.0"},
			Tags:   []string{"ghcr.io/elector-sidecar/elector-sidecar:0.2.0"}, Created: time.Unix(1700000000, 0).UTC(),
			Out: out, Format: "oci",
		}
	}
	a, b := filepath.Join(dir, "a.tar"), filepath.Join(dir, "b.tar")
	for _, out := range []string{a, b} {
		if err := Build(spec(out)); err != nil {
			t.Fatal(err)
		}
	}
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if !bytes.Equal(ab, bb) {
		t.Fatal("two builds of the same OCI image differ")
	}

	p, err := layout.FromPath(untar(t, a))
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("index.json has %d manifests, want 1", len(im.Manifests))
	}
	d := im.Manifests[0]
	if d.MediaType != types.OCIManifestSchema1 || d.Platform == nil || d.Platform.Architecture != "arm64" ||
		d.Annotations["io.containerd.image.name"] != "ghcr.io/elector-sidecar/elector-sidecar:0.2.0" ||
		d.Annotations["org.opencontainers.image.ref.name"] != "0.2.0" {
		t.Errorf("index descriptor %+v", d)
	}
	img, err := idx.Image(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(img); err != nil {
		t.Fatalf("invalid image: %v", err)
	}
	m, _ := img.Manifest()
	if m.Config.MediaType != types.OCIConfigJSON || len(m.Layers) != 1 || m.Layers[0].MediaType != types.OCILayer {
		raw, _ := json.Marshal(m)
		t.Errorf("manifest media types: %s", raw)
	}
	cf, _ := img.ConfigFile()
	if cf.Architecture != "arm64" || strings.Join(cf.Config.Entrypoint, " ") != "/hello" || cf.Config.User != "65532:65532" {
		t.Errorf("config %+v", cf.Config)
	}
	hdrs, _ := imageFiles(t, img)
	if hdrs["/hello"] == nil || hdrs["/tmp"] == nil {
		t.Errorf("image files %v, want /hello and /tmp", hdrs)
	}

	if err := run([]string{"--format", "zip", "--file", bin + ":/hello", "--tag", "x:1", "--out", filepath.Join(dir, "c.tar")}, io.Discard); err == nil ||
		!strings.Contains(err.Error(), `--format "zip": want docker or oci`) {
		t.Errorf("--format zip: %v", err)
	}
}
