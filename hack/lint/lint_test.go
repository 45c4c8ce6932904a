package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The way hack/lint.sh runs it (go vet with this command as the vet tool) on
// testdata/m: every linter reports under its check's name exactly the
// findings its `// want "regexp"` comments name; //nolint (all linters or this
// one), a generated file, errcheck's exclusions and a file's exclusion
// silence it; go vet fails.
func TestEveryLinterReportsWhatTestdataWantsAndTheExceptionsSilenceIt(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "elector-lint")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command("go", "vet", "-vettool="+bin, "./...")
	cmd.Dir = filepath.Join("testdata", "m")
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("go vet passed on testdata/m:\n%s", out)
	}
	wants := readWants(t, cmd.Dir)
	finding := regexp.MustCompile(`^(?:\./)?([^:\s]+\.go):(\d+):\d+: (.*)$`)
	for line := range strings.SplitSeq(string(out), "\n") {
		m := finding.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at := m[1] + ":" + m[2]
		if re, ok := wants[at]; !ok || !re.MatchString(m[3]) {
			t.Errorf("unexpected finding %s: %s", at, m[3])
			continue
		}
		delete(wants, at)
	}
	for at, re := range wants {
		t.Errorf("no finding at %s matching %q", at, re)
	}
	if t.Failed() {
		t.Logf("go vet's output:\n%s", out)
	}
}

// readWants maps "file.go:line" to the regexp of its `// want "..."` comment.
func readWants(t *testing.T, dir string) map[string]*regexp.Regexp {
	wants := map[string]*regexp.Regexp{}
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, name := range files {
		text, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range strings.Split(string(text), "\n") {
			_, want, ok := strings.Cut(line, "// want ")
			if !ok {
				continue
			}
			re, err := strconv.Unquote(want)
			if err != nil {
				t.Fatalf("%s:%d: want %s: %v", name, n+1, want, err)
			}
			wants[filepath.Base(name)+":"+strconv.Itoa(n+1)] = regexp.MustCompile(re)
		}
	}
	return wants
}
