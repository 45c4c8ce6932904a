package main

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// writeOCILayout writes img as an OCI image layout (oci-layout, index.json, blobs/sha256/...) in one tar
// stream, every entry with mtime and owner fixed, so the same image gives the same bytes.
func writeOCILayout(w io.Writer, img v1.Image, tags []string, mtime time.Time) error {
	manifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	mdigest, err := img.Digest()
	if err != nil {
		return err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	cdigest, err := img.ConfigName()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	type desc struct {
		MediaType   types.MediaType   `json:"mediaType"`
		Digest      string            `json:"digest"`
		Size        int64             `json:"size"`
		Annotations map[string]string `json:"annotations,omitempty"`
		Platform    *v1.Platform      `json:"platform,omitempty"`
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	index := struct {
		SchemaVersion int    `json:"schemaVersion"`
		MediaType     string `json:"mediaType"`
		Manifests     []desc `json:"manifests"`
	}{SchemaVersion: 2, MediaType: string(types.OCIImageIndex)}
	for _, t := range tags {
		ref, err := name.NewTag(t)
		if err != nil {
			return fmt.Errorf("--tag %q: %w", t, err)
		}
		index.Manifests = append(index.Manifests, desc{
			MediaType: types.OCIManifestSchema1, Digest: mdigest.String(), Size: int64(len(manifest)),
			Annotations: map[string]string{
				// containerd (ctr images import) and docker load read the full name from the first,
				// OCI tools the tag from the second.
				"io.containerd.image.name":          ref.Name(),
				"org.opencontainers.image.ref.name": ref.TagStr(),
			},
			Platform: &v1.Platform{OS: cf.OS, Architecture: cf.Architecture},
		})
	}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return err
	}

	tw := tar.NewWriter(w)
	add := func(name string, mode int64, typ byte, data []byte) error {
		hdr := &tar.Header{Name: name, Mode: mode, Typeflag: typ, ModTime: mtime, Format: tar.FormatPAX}
		if typ == tar.TypeReg {
			hdr.Size = int64(len(data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := add("blobs/", 0o755, tar.TypeDir, nil); err != nil {
		return err
	}
	if err := add("blobs/sha256/", 0o755, tar.TypeDir, nil); err != nil {
		return err
	}
	blobs := map[string][]byte{mdigest.Hex: manifest, cdigest.Hex: config}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		b, err := io.ReadAll(rc)
		_ = rc.Close()
		if err != nil {
			return err
		}
		blobs[d.Hex] = b
	}
	keys := make([]string, 0, len(blobs))
	for k := range blobs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := add("blobs/sha256/"+k, 0o644, tar.TypeReg, blobs[k]); err != nil {
			return err
		}
	}
	if err := add("index.json", 0o644, tar.TypeReg, indexJSON); err != nil {
		return err
	}
	if err := add("oci-layout", 0o644, tar.TypeReg, []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	return tw.Close()
}

// writeFileAtomic writes via a temporary file in out's directory, then renames it to out (0644).
func writeFileAtomic(out string, write func(io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), ".mkimage-*.tar")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if err := write(tmp); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("writing %s: %w", out, err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), out)
}
