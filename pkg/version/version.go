// Package version holds the build version, stamped with -ldflags.
package version

// Version is set at build time:
//
//	-ldflags "-X github.com/elector-sidecar/elector-sidecar/pkg/version.Version=v0.1.0"
var Version = "dev"
