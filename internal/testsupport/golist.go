package testsupport

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// GoListDeps runs `go list -deps -f format .` in dir as the image builds
// (CGO_ENABLED=0) and returns its lines: the packages the package in dir
// links (not its tests), dependencies first. The deps tests use it to keep
// a binary or a library's imports in check.
func GoListDeps(t testing.TB, dir, format string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", format, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list -deps: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list -deps: %v", err)
	}
	var lines []string
	for line := range strings.Lines(string(out)) {
		lines = append(lines, strings.TrimSpace(line))
	}
	return lines
}
