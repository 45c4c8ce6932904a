package version

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestGetRevision(t *testing.T) {
	saved := Revision
	defer func() { Revision = saved }()

	Revision = "0123abc"
	if got := GetRevision(); got != "0123abc" {
		t.Errorf("with -X Revision: GetRevision() = %q, want 0123abc", got)
	}

	// Without -X: the commit go build stamped in (a test binary has none), else "unknown".
	Revision = ""
	want := "unknown"
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				want = s.Value
			}
		}
	}
	if got := GetRevision(); !strings.HasPrefix(got, want) || got == "" {
		t.Errorf("without -X: GetRevision() = %q, want %q", got, want)
	}
}
