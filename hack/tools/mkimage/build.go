package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// FileEntry is a local file copied into the image.
type FileEntry struct {
	Src  string
	Dst  string      // absolute path in the image
	Mode os.FileMode // 0 = derive from the source file (0755 if executable, else 0644)
}

// DirEntry is an empty directory in the image.
type DirEntry struct {
	Path     string
	Mode     os.FileMode // permission bits plus os.ModeSticky etc.
	UID, GID int         // owner (0:0 unless given, like every file)
}

// Spec describes the image to build.
type Spec struct {
	Files      []FileEntry
	Dirs       []DirEntry
	Entrypoint []string
	Cmd        []string
	User       string
	WorkingDir string
	Labels     map[string]string
	Env        []string
	Tags       []string
	OS, Arch   string
	Created    time.Time
	Out        string
	// Format of the output tarball: "docker" (`docker save`, the default) or "oci" (an OCI image layout in
	// one tar: OCI media types, index.json naming every tag).
	Format string
}

func parseMode(s string) (os.FileMode, error) {
	n, err := strconv.ParseUint(s, 8, 32)
	if err != nil || n > 07777 {
		return 0, fmt.Errorf("mode %q: want octal permission bits such as 0755 or 1777", s)
	}
	m := os.FileMode(n & 0777)
	if n&01000 != 0 {
		m |= os.ModeSticky
	}
	if n&02000 != 0 {
		m |= os.ModeSetgid
	}
	if n&04000 != 0 {
		m |= os.ModeSetuid
	}
	return m, nil
}

func cleanImagePath(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("image path %q must be absolute", p)
	}
	c := path.Clean(p)
	if c == "/" {
		return "", fmt.Errorf("image path %q: cannot be the root", p)
	}
	return c, nil
}

// parseFile parses src:dst[:mode].
func parseFile(s string) (FileEntry, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" {
		return FileEntry{}, fmt.Errorf("%q: want src:dst[:mode]", s)
	}
	dst, err := cleanImagePath(parts[1])
	if err != nil {
		return FileEntry{}, fmt.Errorf("%q: %v", s, err)
	}
	e := FileEntry{Src: parts[0], Dst: dst}
	if len(parts) == 3 {
		if e.Mode, err = parseMode(parts[2]); err != nil {
			return FileEntry{}, fmt.Errorf("%q: %v", s, err)
		}
	}
	return e, nil
}

// parseDir parses path[:mode[:uid:gid]].
func parseDir(s string) (DirEntry, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 1 && len(parts) != 2 && len(parts) != 4 {
		return DirEntry{}, fmt.Errorf("%q: want path[:mode[:uid:gid]]", s)
	}
	c, err := cleanImagePath(parts[0])
	if err != nil {
		return DirEntry{}, fmt.Errorf("%q: %v", s, err)
	}
	e := DirEntry{Path: c, Mode: 0755}
	if len(parts) >= 2 {
		if e.Mode, err = parseMode(parts[1]); err != nil {
			return DirEntry{}, fmt.Errorf("%q: %v", s, err)
		}
	}
	if len(parts) == 4 {
		for i, p := range []*int{&e.UID, &e.GID} {
			n, err := strconv.ParseUint(parts[2+i], 10, 31)
			if err != nil {
				return DirEntry{}, fmt.Errorf("%q: owner %q: want numeric uid:gid", s, parts[2]+":"+parts[3])
			}
			*p = int(n)
		}
	}
	return e, nil
}

func tarMode(m os.FileMode) int64 {
	v := int64(m.Perm())
	if m&os.ModeSticky != 0 {
		v |= 01000
	}
	if m&os.ModeSetgid != 0 {
		v |= 02000
	}
	if m&os.ModeSetuid != 0 {
		v |= 04000
	}
	return v
}

// layerTar returns the uncompressed layer: parent directories, the directories and the files,
// owned by root (directories: by their given owner), with the given modification time, in a
// deterministic order.
func layerTar(files []FileEntry, dirs []DirEntry, mtime time.Time) ([]byte, error) {
	type entry struct {
		hdr  tar.Header
		data []byte
	}
	entries := map[string]*entry{}
	addParents := func(p string) {
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if _, ok := entries[d]; !ok {
				entries[d] = &entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0755}}
			}
		}
	}
	for _, d := range dirs {
		if old, ok := entries[d.Path]; ok && old.hdr.Typeflag != tar.TypeDir {
			return nil, fmt.Errorf("%s: both a file and a directory", d.Path)
		}
		addParents(d.Path)
		entries[d.Path] = &entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d.Path, "/") + "/", Mode: tarMode(d.Mode), Uid: d.UID, Gid: d.GID}}
	}
	for _, f := range files {
		if _, ok := entries[f.Dst]; ok {
			return nil, fmt.Errorf("%s: added twice", f.Dst)
		}
		st, err := os.Stat(f.Src)
		if err != nil {
			return nil, err
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("%s: not a regular file", f.Src)
		}
		data, err := os.ReadFile(f.Src)
		if err != nil {
			return nil, err
		}
		mode := f.Mode
		if mode == 0 {
			mode = 0644
			if st.Mode().Perm()&0111 != 0 {
				mode = 0755
			}
		}
		addParents(f.Dst)
		entries[f.Dst] = &entry{
			hdr:  tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(f.Dst, "/"), Mode: tarMode(mode), Size: int64(len(data))},
			data: data,
		}
	}
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		e := entries[n]
		if e.hdr.Uid == 0 {
			e.hdr.Uname = "root"
		}
		if e.hdr.Gid == 0 {
			e.hdr.Gname = "root"
		}
		e.hdr.ModTime = mtime
		e.hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(&e.hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Image builds the image described by spec (without writing it).
func Image(spec Spec) (v1.Image, error) {
	if len(spec.Files) == 0 && len(spec.Dirs) == 0 {
		return nil, fmt.Errorf("nothing to put in the image: give --file or --dir")
	}
	layerBytes, err := layerTar(spec.Files, spec.Dirs, spec.Created)
	if err != nil {
		return nil, fmt.Errorf("building layer: %w", err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("building layer: %w", err)
	}
	base, layerType := empty.Image, types.MediaType("")
	if spec.Format == "oci" {
		base = mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
		layerType = types.OCILayer
	}
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:     layer,
		History:   v1.History{Created: v1.Time{Time: spec.Created}, CreatedBy: "mkimage", Comment: "files: " + fileList(spec)},
		MediaType: layerType,
	})
	if err != nil {
		return nil, fmt.Errorf("appending layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS = spec.OS
	cf.Architecture = spec.Arch
	cf.Created = v1.Time{Time: spec.Created}
	cf.Config.Entrypoint = spec.Entrypoint
	cf.Config.Cmd = spec.Cmd
	cf.Config.User = spec.User
	cf.Config.WorkingDir = spec.WorkingDir
	cf.Config.Env = spec.Env
	if len(spec.Labels) > 0 {
		cf.Config.Labels = spec.Labels
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("setting config: %w", err)
	}
	return img, nil
}

func fileList(spec Spec) string {
	var l []string
	for _, f := range spec.Files {
		l = append(l, f.Dst)
	}
	for _, d := range spec.Dirs {
		l = append(l, d.Path+"/")
	}
	return strings.Join(l, " ")
}

// Build builds the image and writes it, tagged with every spec.Tags, to spec.Out (atomically).
func Build(spec Spec) error {
	refs := map[name.Reference]v1.Image{}
	img, err := Image(spec)
	if err != nil {
		return err
	}
	switch spec.Format {
	case "oci":
		return writeFileAtomic(spec.Out, func(w io.Writer) error { return writeOCILayout(w, img, spec.Tags, spec.Created) })
	case "", "docker":
	default:
		return fmt.Errorf("--format %q: want docker or oci", spec.Format)
	}
	for _, t := range spec.Tags {
		ref, err := name.NewTag(t)
		if err != nil {
			return fmt.Errorf("--tag %q: %w", t, err)
		}
		refs[ref] = img
	}
	if err := os.MkdirAll(filepath.Dir(spec.Out), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(spec.Out), ".mkimage-*.tar")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if err := tarball.MultiRefWrite(refs, tmp); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("writing %s: %w", spec.Out, err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), spec.Out)
}
