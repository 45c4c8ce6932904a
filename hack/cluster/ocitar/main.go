// Command ocitar writes a single-layer container image as an image tarball (the "docker save" format, which
// `ctr images import` and `docker load` read) without a container engine or a registry.
//
//	ocitar -o pause.tar -ref registry.k8s.io/pause:3.10.2 -file ./pause:/pause -entrypoint /pause
//
// -file SRC:DST[:MODE] copies a local file into the image (repeatable; MODE is octal, default 0755 for
// executables, 0644 otherwise). The layer also holds an empty /tmp (mode 1777). -ref is repeatable.
// Timestamps are zero, so the same inputs give the same image digest.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

type file struct {
	src, dst string
	mode     int64
}

func main() {
	var refs, files, entrypoint, cmd, env multi
	out := flag.String("o", "", "output tarball path (required)")
	workdir := flag.String("workdir", "/", "working directory")
	user := flag.String("user", "", "user (e.g. 65532:65532), default root")
	flag.Var(&refs, "ref", "image reference, e.g. example.local/app:v1 (repeatable, at least one)")
	flag.Var(&files, "file", "SRC:DST[:MODE] file to add (repeatable)")
	flag.Var(&entrypoint, "entrypoint", "entrypoint argument (repeatable, in order)")
	flag.Var(&cmd, "cmd", "cmd argument (repeatable, in order)")
	flag.Var(&env, "env", "KEY=VALUE environment entry (repeatable)")
	flag.Parse()
	if err := run(*out, refs, files, entrypoint, cmd, env, *workdir, *user); err != nil {
		fmt.Fprintln(os.Stderr, "ocitar:", err)
		os.Exit(1)
	}
}

func run(out string, refs, files, entrypoint, cmd, env []string, workdir, user string) error {
	if out == "" || len(refs) == 0 {
		return fmt.Errorf("-o and at least one -ref are required")
	}
	var fs []file
	for _, f := range files {
		parts := strings.Split(f, ":")
		if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || !strings.HasPrefix(parts[1], "/") {
			return fmt.Errorf("bad -file %q, want SRC:/DST[:MODE]", f)
		}
		fl := file{src: parts[0], dst: path.Clean(parts[1]), mode: -1}
		if len(parts) == 3 {
			m, err := strconv.ParseInt(parts[2], 8, 32)
			if err != nil {
				return fmt.Errorf("bad mode in -file %q: %w", f, err)
			}
			fl.mode = m
		}
		fs = append(fs, fl)
	}
	layerTar, err := buildLayer(fs)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return fmt.Errorf("layer: %w", err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return fmt.Errorf("append layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = runtime.GOARCH
	cf.Config = v1.Config{
		Entrypoint: entrypoint,
		Cmd:        cmd,
		Env:        append([]string{"PATH=/usr/local/bin:/usr/bin:/bin"}, env...),
		WorkingDir: workdir,
		User:       user,
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return fmt.Errorf("set config: %w", err)
	}
	refToImage := map[name.Reference]v1.Image{}
	for _, r := range refs {
		ref, err := name.ParseReference(r)
		if err != nil {
			return fmt.Errorf("bad -ref %q: %w", r, err)
		}
		refToImage[ref] = img
	}
	tmp := out + ".tmp"
	w, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := tarball.MultiRefWrite(refToImage, w); err != nil {
		w.Close()
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", out, err)
	}
	if err := w.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, out)
}

// buildLayer returns an uncompressed tar with the files, their parent dirs and an empty /tmp.
func buildLayer(fs []file) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{"tmp": true}
	for _, f := range fs {
		for d := path.Dir(strings.TrimPrefix(f.dst, "/")); d != "." && d != ""; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	var dl []string
	for d := range dirs {
		dl = append(dl, d)
	}
	sort.Strings(dl)
	for _, d := range dl {
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	for _, f := range fs {
		data, err := os.ReadFile(f.src)
		if err != nil {
			return nil, err
		}
		mode := f.mode
		if mode < 0 {
			mode = 0o644
			if st, err := os.Stat(f.src); err == nil && st.Mode()&0o111 != 0 {
				mode = 0o755
			}
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(f.dst, "/"), Mode: mode, Size: int64(len(data)), Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
