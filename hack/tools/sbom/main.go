// Command sbom writes an SPDX 2.3 JSON software bill of materials for one release artefact (a binary, an image
// tarball, the packaged chart): the artefact with its SHA-256, and for every Go binary in it (--binary) the Go
// toolchain and each module compiled in, read from the binary's own build information (what `go version -m`
// prints). The document is a pure function of its inputs: creation time from --created or $SOURCE_DATE_EPOCH,
// namespace from the artefact's digest, everything sorted. `make release` (hack/release.sh) runs it per artefact.
//
//	sbom --artefact _output/release/elector-sidecar-linux-amd64 --name elector-sidecar --version 0.2.0 \
//	     --binary _output/release/elector-sidecar-linux-amd64 --out elector-sidecar-linux-amd64.spdx.json
package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	if err := run(os.Args[1:], os.Getenv("SOURCE_DATE_EPOCH"), os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "sbom:", err)
		os.Exit(1)
	}
}

// Options are the command line.
type Options struct {
	Artefact string   // the file described (its SHA-256 goes in)
	Name     string   // package name of the artefact
	Version  string   // its version
	Binaries []string // Go binaries in the artefact (the artefact itself for a binary); "path" or "path=/name/in/image"
	Created  time.Time
	Out      string
}

func run(args []string, sourceDateEpoch string, stderr io.Writer) error {
	fs := flag.NewFlagSet("sbom", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o Options
	var bins stringList
	var created string
	fs.StringVar(&o.Artefact, "artefact", "", "the release artefact `file` described (required)")
	fs.StringVar(&o.Name, "name", "", "the artefact's package name (default: the file name)")
	fs.StringVar(&o.Version, "version", "", "the artefact's version (required)")
	fs.Var(&bins, "binary", "a Go binary in the artefact, `path[=/path/in/artefact]`; repeatable")
	fs.StringVar(&created, "created", "", "creation time (RFC 3339); default: $SOURCE_DATE_EPOCH (required one way or the other, for reproducible output)")
	fs.StringVar(&o.Out, "out", "", "output `file` (default: stdout)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.Artefact == "" || o.Version == "" {
		return errors.New("--artefact and --version are required")
	}
	if o.Name == "" {
		o.Name = filepath.Base(o.Artefact)
	}
	o.Binaries = bins
	switch {
	case created != "":
		t, err := time.Parse(time.RFC3339, created)
		if err != nil {
			return fmt.Errorf("--created: %v", err)
		}
		o.Created = t.UTC()
	case sourceDateEpoch != "":
		secs, err := strconv.ParseInt(sourceDateEpoch, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH=%q: not a number of seconds", sourceDateEpoch)
		}
		o.Created = time.Unix(secs, 0).UTC()
	default:
		return errors.New("no creation time: set --created or SOURCE_DATE_EPOCH (an SBOM stamped with the current time would differ between two builds)")
	}
	doc, err := Build(o)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if o.Out == "" {
		_, err = os.Stdout.Write(b)
		return err
	}
	return os.WriteFile(o.Out, b, 0o644)
}

// Document is the subset of SPDX 2.3 JSON this tool writes.
type Document struct {
	SPDXVersion       string         `json:"spdxVersion"`
	DataLicense       string         `json:"dataLicense"`
	SPDXID            string         `json:"SPDXID"`
	Name              string         `json:"name"`
	DocumentNamespace string         `json:"documentNamespace"`
	CreationInfo      CreationInfo   `json:"creationInfo"`
	Packages          []Package      `json:"packages"`
	Relationships     []Relationship `json:"relationships"`
}

type CreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type Package struct {
	Name             string        `json:"name"`
	SPDXID           string        `json:"SPDXID"`
	VersionInfo      string        `json:"versionInfo,omitempty"`
	DownloadLocation string        `json:"downloadLocation"`
	FilesAnalyzed    bool          `json:"filesAnalyzed"`
	Checksums        []Checksum    `json:"checksums,omitempty"`
	LicenseConcluded string        `json:"licenseConcluded"`
	LicenseDeclared  string        `json:"licenseDeclared"`
	CopyrightText    string        `json:"copyrightText"`
	PrimaryPurpose   string        `json:"primaryPackagePurpose,omitempty"`
	ExternalRefs     []ExternalRef `json:"externalRefs,omitempty"`
}

type Checksum struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"`
}

type ExternalRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type Relationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

const project = "github.com/elector-sidecar/elector-sidecar"

var idUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

func spdxID(kind, name, version string) string {
	return "SPDXRef-" + kind + "-" + strings.Trim(idUnsafe.ReplaceAllString(name+"-"+version, "-"), "-")
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Build reads the artefact and its binaries and returns the document.
func Build(o Options) (*Document, error) {
	sum, err := fileSHA256(o.Artefact)
	if err != nil {
		return nil, fmt.Errorf("artefact: %w", err)
	}
	top := Package{
		Name: o.Name, SPDXID: spdxID("Package", o.Name, o.Version), VersionInfo: o.Version,
		DownloadLocation: "https://" + project + "/releases/tag/v" + o.Version, Checksums: []Checksum{{"SHA256", sum}},
		LicenseConcluded: "Apache-2.0", LicenseDeclared: "Apache-2.0", CopyrightText: "NOASSERTION", PrimaryPurpose: "APPLICATION",
	}
	doc := &Document{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name:              o.Name + "-" + o.Version,
		DocumentNamespace: "https://" + project + "/spdx/" + o.Name + "-" + o.Version + "-" + sum,
		CreationInfo:      CreationInfo{Created: o.Created.Format(time.RFC3339), Creators: []string{"Organization: elector-sidecar", "Tool: elector-sidecar-sbom"}},
		Packages:          []Package{top},
		Relationships:     []Relationship{{"SPDXRef-DOCUMENT", "DESCRIBES", top.SPDXID}},
	}
	seen := map[string]bool{top.SPDXID: true}
	addPkg := func(p Package) {
		if !seen[p.SPDXID] {
			seen[p.SPDXID] = true
			doc.Packages = append(doc.Packages, p)
		}
	}
	for _, b := range o.Binaries {
		path, inName, _ := strings.Cut(b, "=")
		if inName == "" {
			inName = filepath.Base(path)
		}
		info, err := buildinfo.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("--binary %s: no Go build information (%w); is it a Go binary?", path, err)
		}
		bsum, err := fileSHA256(path)
		if err != nil {
			return nil, err
		}
		bin := Package{
			Name: inName, SPDXID: spdxID("File", inName, o.Version), VersionInfo: o.Version, DownloadLocation: "NOASSERTION",
			Checksums: []Checksum{{"SHA256", bsum}}, LicenseConcluded: "NOASSERTION", LicenseDeclared: "NOASSERTION",
			CopyrightText: "NOASSERTION", PrimaryPurpose: "APPLICATION",
			ExternalRefs: []ExternalRef{{"PACKAGE-MANAGER", "purl", "pkg:golang/" + info.Path + "@v" + o.Version}},
		}
		if bin.SPDXID != top.SPDXID {
			addPkg(bin)
			doc.Relationships = append(doc.Relationships, Relationship{top.SPDXID, "CONTAINS", bin.SPDXID})
		}
		gover := strings.TrimPrefix(info.GoVersion, "go")
		std := Package{Name: "stdlib", SPDXID: spdxID("Package", "golang-stdlib", gover), VersionInfo: "go" + gover,
			DownloadLocation: "https://go.dev/dl/", LicenseConcluded: "NOASSERTION", LicenseDeclared: "BSD-3-Clause", CopyrightText: "NOASSERTION",
			ExternalRefs: []ExternalRef{{"PACKAGE-MANAGER", "purl", "pkg:golang/stdlib@go" + gover}}}
		addPkg(std)
		doc.Relationships = append(doc.Relationships, Relationship{bin.SPDXID, "DEPENDS_ON", std.SPDXID})
		for _, d := range info.Deps {
			m := d
			if d.Replace != nil {
				m = d.Replace
			}
			p := Package{Name: m.Path, SPDXID: spdxID("Package", m.Path, m.Version), VersionInfo: m.Version,
				DownloadLocation: "https://proxy.golang.org/" + m.Path + "/@v/" + m.Version + ".zip",
				LicenseConcluded: "NOASSERTION", LicenseDeclared: "NOASSERTION", CopyrightText: "NOASSERTION",
				ExternalRefs: []ExternalRef{{"PACKAGE-MANAGER", "purl", "pkg:golang/" + m.Path + "@" + m.Version}}}
			if m.Sum != "" {
				p.Checksums = nil // go.sum's h1: hash is not an SPDX algorithm; the purl and version identify it
			}
			addPkg(p)
			doc.Relationships = append(doc.Relationships, Relationship{bin.SPDXID, "DEPENDS_ON", p.SPDXID})
		}
	}
	rest := doc.Packages[1:]
	sort.Slice(rest, func(i, j int) bool { return rest[i].SPDXID < rest[j].SPDXID })
	sort.SliceStable(doc.Relationships[1:], func(i, j int) bool {
		a, b := doc.Relationships[1+i], doc.Relationships[1+j]
		if a.Element != b.Element {
			return a.Element < b.Element
		}
		if a.Type != b.Type {
			return a.Type < b.Type
		}
		return a.Related < b.Related
	})
	return doc, nil
}
