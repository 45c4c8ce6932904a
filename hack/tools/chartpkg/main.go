// Command chartpkg packages a Helm chart directory as `helm package` does (CHART-VERSION.tgz holding
// CHART/...), but reproducibly: entries sorted, every mtime from --created or $SOURCE_DATE_EPOCH, owner 0:0,
// modes 0644/0755, and a gzip header without name or time. It refuses a chart whose Chart.yaml version is
// not --version, so the package's file name, its Chart.yaml and the release tag cannot disagree.
//
//	chartpkg --chart charts/elector-sidecar --version 0.2.0 --out-dir _output/release
package main

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

func main() {
	if err := run(os.Args[1:], os.Getenv("SOURCE_DATE_EPOCH"), os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "chartpkg:", err)
		os.Exit(1)
	}
}

func run(args []string, sourceDateEpoch string, stdout, stderr io.Writer) error {
	fl := flag.NewFlagSet("chartpkg", flag.ContinueOnError)
	fl.SetOutput(stderr)
	chart := fl.String("chart", "", "chart `directory` (required)")
	version := fl.String("version", "", "the version the chart's Chart.yaml must carry (required)")
	outDir := fl.String("out-dir", ".", "where to write NAME-VERSION.tgz")
	created := fl.String("created", "", "mtime of every entry (RFC 3339); default: $SOURCE_DATE_EPOCH")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *chart == "" || *version == "" {
		return errors.New("--chart and --version are required")
	}
	var mtime time.Time
	switch {
	case *created != "":
		t, err := time.Parse(time.RFC3339, *created)
		if err != nil {
			return fmt.Errorf("--created: %v", err)
		}
		mtime = t
	case sourceDateEpoch != "":
		secs, err := strconv.ParseInt(sourceDateEpoch, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH=%q: not a number of seconds", sourceDateEpoch)
		}
		mtime = time.Unix(secs, 0)
	default:
		return errors.New("no mtime: set --created or SOURCE_DATE_EPOCH (the current time would make every package differ)")
	}
	out, err := Package(*chart, *version, *outDir, mtime.UTC())
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, out)
	return err
}

// chartMeta reads name, version and appVersion from Chart.yaml's top-level scalar lines.
func chartMeta(dir string) (map[string]string, error) {
	f, err := os.Open(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	m := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == ' ' || line[0] == '#' || line[0] == '-' {
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		m[k] = strings.Trim(strings.TrimSpace(v), `"'`)
	}
	return m, sc.Err()
}

// Package writes dir as NAME-VERSION.tgz into outDir and returns its path.
func Package(dir, version, outDir string, mtime time.Time) (string, error) {
	meta, err := chartMeta(dir)
	if err != nil {
		return "", fmt.Errorf("chart %s: %w", dir, err)
	}
	name := meta["name"]
	if name == "" {
		return "", fmt.Errorf("chart %s: Chart.yaml has no name", dir)
	}
	if meta["version"] != version {
		return "", fmt.Errorf("chart %s: Chart.yaml version is %q, not %q: set version (and appVersion) in Chart.yaml first", dir, meta["version"], version)
	}
	ignore, err := helmignore(dir)
	if err != nil {
		return "", err
	}
	var files []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		if ignore(rel, d.IsDir()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() {
			files = append(files, rel)
		} else if !d.IsDir() {
			return fmt.Errorf("%s: not a regular file (symlinks are not packaged)", p)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(files)
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(outDir, name+"-"+version+".tgz")
	tmp, err := os.CreateTemp(outDir, ".chartpkg-*")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	gz, err := gzip.NewWriterLevel(tmp, gzip.BestCompression)
	if err != nil {
		return "", err
	}
	tw := tar.NewWriter(gz)
	for _, rel := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		b, err := os.ReadFile(p)
		if err != nil {
			return "", err
		}
		st, err := os.Stat(p)
		if err != nil {
			return "", err
		}
		mode := int64(0o644)
		if st.Mode()&0o111 != 0 {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Name: name + "/" + rel, Mode: mode, Size: int64(len(b)), ModTime: mtime, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return "", err
		}
		if _, err := tw.Write(b); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := gz.Close(); err != nil {
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return "", err
	}
	return out, os.Rename(tmp.Name(), out)
}

// helmignore returns a matcher for the chart's .helmignore (shell globs on the path or its base name, a
// trailing / for directories, # comments), as helm package applies it; .helmignore itself is packaged.
func helmignore(dir string) (func(rel string, isDir bool) bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, ".helmignore"))
	if errors.Is(err, fs.ErrNotExist) {
		return func(string, bool) bool { return false }, nil
	}
	if err != nil {
		return nil, err
	}
	var pats []string
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasPrefix(l, "!") {
			return nil, fmt.Errorf(".helmignore: negated pattern %q is not supported", l)
		}
		pats = append(pats, l)
	}
	return func(rel string, isDir bool) bool {
		for _, p := range pats {
			dirOnly := strings.HasSuffix(p, "/")
			p = strings.TrimSuffix(p, "/")
			if dirOnly && !isDir {
				continue
			}
			if ok, _ := filepath.Match(p, rel); ok {
				return true
			}
			if ok, _ := filepath.Match(p, filepath.Base(rel)); ok {
				return true
			}
		}
		return false
	}, nil
}
