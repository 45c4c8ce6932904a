// Command krew writes the krew plugin manifest of `kubectl elector` for a release, and the archives it points
// at (krew installs from archives): for each linux ARCH, kubectl-elector-VERSION-linux-ARCH.tar.gz holding
// the release's binary as kubectl-elector and the LICENSE, reproducibly (entries sorted, mtime from
// $SOURCE_DATE_EPOCH, owner 0:0, gzip header without name or time); then elector.yaml, a
// krew.googlecontainertools.github.com/v1alpha2 Plugin whose platforms carry each archive's download URL and
// sha256. hack/release.sh runs it in the release directory before SHA256SUMS.
//
//	krew --version 0.2.0 --dir _output/release/0.2.0 --license LICENSE --arches "amd64 arm64"
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"text/template"
	"time"
)

// ManifestName is the manifest's file name (krew's index wants plugins/elector.yaml).
const ManifestName = "elector.yaml"

func main() {
	if err := run(os.Args[1:], os.Getenv("SOURCE_DATE_EPOCH"), os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "krew:", err)
		os.Exit(1)
	}
}

type platform struct {
	Arch, URI, SHA256 string
}

var manifest = template.Must(template.New("manifest").Parse(`apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: elector
spec:
  version: v{{ .Version }}
  homepage: https://github.com/elector-sidecar/elector-sidecar
  shortDescription: Show, follow and release elector-sidecar Lease elections
  description: |
    Shows the leader election of elector-sidecar on coordination.k8s.io/v1 Leases: the holder,
    its fencing token (spec.leaseTransitions), renewal and expiry, and the Events the sidecars
    record; follows leadership changes (watch); makes the holder give its token back (release,
    through a port-forward to the holder pod's sidecar).
  platforms:
{{- range .Platforms }}
  - selector:
      matchLabels:
        os: linux
        arch: {{ .Arch }}
    uri: {{ .URI }}
    sha256: {{ .SHA256 }}
    bin: kubectl-elector
    files:
    - from: kubectl-elector
      to: .
    - from: LICENSE
      to: .
{{- end }}
`))

var semver = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)

func run(args []string, sourceDateEpoch string, stderr io.Writer) error {
	fl := flag.NewFlagSet("krew", flag.ContinueOnError)
	fl.SetOutput(stderr)
	version := fl.String("version", "", "the release's X.Y.Z (required)")
	dir := fl.String("dir", "", "the release `directory` holding kubectl-elector-VERSION-linux-ARCH (required); the archives and "+ManifestName+" go there too")
	license := fl.String("license", "", "the LICENSE `file` to put in each archive (required)")
	arches := fl.String("arches", "amd64 arm64", "space-separated linux architectures")
	urlBase := fl.String("url-base", "", "where the archives are downloaded from (default: the GitHub release vVERSION)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *version == "" || *dir == "" || *license == "" {
		return errors.New("--version, --dir and --license are required")
	}
	if !semver.MatchString(*version) {
		return fmt.Errorf("--version %q: want X.Y.Z (no leading v)", *version)
	}
	if sourceDateEpoch == "" {
		return errors.New("SOURCE_DATE_EPOCH is not set: the archives' time stamp must come from the release's commit")
	}
	secs, err := strconv.ParseInt(sourceDateEpoch, 10, 64)
	if err != nil {
		return fmt.Errorf("SOURCE_DATE_EPOCH=%q: not a number of seconds", sourceDateEpoch)
	}
	mtime := time.Unix(secs, 0).UTC()
	base := *urlBase
	if base == "" {
		base = "https://github.com/elector-sidecar/elector-sidecar/releases/download/v" + *version
	}
	lic, err := os.ReadFile(*license)
	if err != nil {
		return err
	}
	var data struct {
		Version   string
		Platforms []platform
	}
	data.Version = *version
	for _, arch := range strings.Fields(*arches) {
		bin, err := os.ReadFile(filepath.Join(*dir, fmt.Sprintf("kubectl-elector-%s-linux-%s", *version, arch)))
		if err != nil {
			return err
		}
		name := fmt.Sprintf("kubectl-elector-%s-linux-%s.tar.gz", *version, arch)
		archive, err := tarGz(mtime, []entry{{"LICENSE", 0o644, lic}, {"kubectl-elector", 0o755, bin}})
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(*dir, name), archive, 0o644); err != nil {
			return err
		}
		sum := sha256.Sum256(archive)
		data.Platforms = append(data.Platforms, platform{Arch: arch, URI: strings.TrimSuffix(base, "/") + "/" + name, SHA256: hex.EncodeToString(sum[:])})
	}
	if len(data.Platforms) == 0 {
		return errors.New("--arches is empty")
	}
	var out bytes.Buffer
	if err := manifest.Execute(&out, data); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(*dir, ManifestName), out.Bytes(), 0o644)
}

type entry struct {
	name string
	mode int64
	body []byte
}

// tarGz is a .tar.gz of entries in the given order, every header the same but for name, mode and size.
func tarGz(mtime time.Time, entries []entry) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Size: int64(len(e.body)), ModTime: mtime, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
