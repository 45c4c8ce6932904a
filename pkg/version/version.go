// Package version holds the build version, stamped with -ldflags.
package version

import "runtime/debug"

// Version is set at build time:
//
//	-ldflags "-X github.com/elector-sidecar/elector-sidecar/pkg/version.Version=0.2.0"
var Version = "dev"

// Revision is the source commit. It may be set at build time
// (-X github.com/elector-sidecar/elector-sidecar/pkg/version.Revision=...);
// when it is not, GetRevision falls back to the commit that go build
// stamped into the binary (vcs.revision), then to "unknown".
var Revision = ""

// GetRevision returns Revision, else the binary's vcs.revision (with
// "-dirty" for a modified tree), else "unknown".
func GetRevision() string {
	if Revision != "" {
		return Revision
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return "unknown"
	}
	if modified == "true" {
		rev += "-dirty"
	}
	return rev
}
