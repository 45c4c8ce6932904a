package framework

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The README's Layout table names every top-level folder and every package
// folder under cmd/, pkg/, internal/ and test/, so a newcomer finds where
// anything lives.
func TestReadmeLayoutNamesEveryFolder(t *testing.T) {
	root := filepath.Join("..", "..")
	md, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(md), "\n## Layout\n")
	if !ok {
		t.Fatal("README.md has no ## Layout section")
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	// The first cell of each row: one or more `path`s.
	named := map[string]bool{}
	cell := regexp.MustCompile("`([^`]+)`")
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first := strings.SplitN(line, "|", 3)[1]
		for _, m := range cell.FindAllStringSubmatch(first, -1) {
			named[strings.TrimSuffix(m[1], "/")] = true
		}
	}
	if len(named) == 0 {
		t.Fatal("the Layout table has no rows")
	}

	var want []string
	top, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range top {
		name := e.Name()
		// Generated or local-only folders: not part of the tree.
		if !e.IsDir() || strings.HasPrefix(name, ".") || name == "bin" || name == "_output" || name == "results" {
			continue
		}
		switch name {
		case "cmd", "pkg", "internal", "test":
			sub, err := os.ReadDir(filepath.Join(root, name))
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range sub {
				if s.IsDir() {
					want = append(want, name+"/"+s.Name())
				}
			}
		default:
			want = append(want, name)
		}
	}
	covers := func(dir string) bool {
		for n := range named {
			if n == dir || strings.HasPrefix(n, dir+"/") {
				return true
			}
		}
		return false
	}
	for _, dir := range want {
		if !covers(dir) {
			t.Errorf("README.md ## Layout does not name %q: add a row saying what lives there", dir)
		}
	}
}
