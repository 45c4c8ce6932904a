package examples

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// pythonImports is run by the Python the worker test uses: it prints the
// top-level modules worker.py imports that are not in the standard
// library, then "name version" for each requirement given as argument
// (version "-" when it is not installed).
const pythonImports = `
import ast, importlib.metadata, sys
tree = ast.parse(open(sys.argv[1]).read())
mods = set()
for node in ast.walk(tree):
    if isinstance(node, ast.Import):
        mods.update(a.name.split(".")[0] for a in node.names)
    elif isinstance(node, ast.ImportFrom) and node.level == 0:
        mods.add(node.module.split(".")[0])
print(" ".join(sorted(m for m in mods if m not in sys.stdlib_module_names)))
for name in sys.argv[2:]:
    try:
        print(name, importlib.metadata.version(name))
    except importlib.metadata.PackageNotFoundError:
        print(name, "-")
`

// requirement is one line of a requirements file: name, then clauses such
// as ">=3.1" and "<4".
var requirementLine = regexp.MustCompile(`^([A-Za-z0-9_.-]+)\s*((?:[<>=!]=?\s*[0-9][0-9.]*\s*,?\s*)*)$`)

// TestPythonWorkerRequirementsNameEveryImport: examples/python-worker/
// requirements.txt names every package worker.py imports beyond the
// standard library, and the Python the worker test runs has a version of
// each that the file allows.
func TestPythonWorkerRequirementsNameEveryImport(t *testing.T) {
	checkPythonRequirements(t, "python-worker")
}

// checkPythonRequirements checks examples/<example>/requirements.txt against
// its worker.py and the Python the tests run.
func checkPythonRequirements(t *testing.T, example string) {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "examples", example)
	f, err := os.Open(filepath.Join(dir, "requirements.txt"))
	if err != nil {
		t.Fatalf("examples/%s has no requirements file: %v", example, err)
	}
	defer func() { _ = f.Close() }()
	reqs := map[string][]string{}
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := requirementLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("requirements.txt: %q is not `name` with version clauses such as >=3.1,<4", line)
		}
		name := strings.ToLower(m[1])
		names = append(names, name)
		for c := range strings.SplitSeq(m[2], ",") {
			if c = strings.ReplaceAll(c, " ", ""); c != "" {
				reqs[name] = append(reqs[name], c)
			}
		}
	}
	out, err := exec.Command("/usr/bin/python3", append([]string{"-c", pythonImports, filepath.Join(dir, "worker.py")}, names...)...).Output()
	if err != nil {
		t.Fatalf("/usr/bin/python3 (the worker test's): %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	imports := strings.Fields(lines[0])
	if len(imports) == 0 {
		t.Fatal("worker.py imports nothing beyond the standard library; the check is not looking at the real worker")
	}
	for _, m := range imports {
		if !slices.Contains(names, strings.ToLower(m)) {
			t.Errorf("worker.py imports %s; requirements.txt does not name it", m)
		}
	}
	for _, l := range lines[1:] {
		name, version, _ := strings.Cut(l, " ")
		if version == "-" {
			t.Errorf("%s is not installed for /usr/bin/python3 (hack/install-deps.sh installs it)", name)
			continue
		}
		for _, c := range reqs[name] {
			if ok, err := satisfies(version, c); err != nil || !ok {
				t.Errorf("the tested %s is %s; requirements.txt wants %s (%v)", name, version, c, err)
			}
		}
	}
}

// satisfies compares a version with one clause (>=3.1, <4, ==3.1.7, ...),
// number by number.
func satisfies(version, clause string) (bool, error) {
	i := strings.IndexFunc(clause, func(r rune) bool { return r >= '0' && r <= '9' })
	if i <= 0 {
		return false, fmt.Errorf("clause %q has no operator", clause)
	}
	op, want := clause[:i], clause[i:]
	cmp, err := compareVersions(version, want)
	if err != nil {
		return false, err
	}
	switch op {
	case ">=":
		return cmp >= 0, nil
	case ">":
		return cmp > 0, nil
	case "<=":
		return cmp <= 0, nil
	case "<":
		return cmp < 0, nil
	case "==":
		return cmp == 0, nil
	case "!=":
		return cmp != 0, nil
	}
	return false, fmt.Errorf("clause %q: unknown operator %q", clause, op)
}

func compareVersions(a, b string) (int, error) {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(pa), len(pb)) {
		var x, y int
		var err error
		if i < len(pa) {
			if x, err = strconv.Atoi(pa[i]); err != nil {
				return 0, fmt.Errorf("version %q: %w", a, err)
			}
		}
		if i < len(pb) {
			if y, err = strconv.Atoi(pb[i]); err != nil {
				return 0, fmt.Errorf("version %q: %w", b, err)
			}
		}
		if x != y {
			if x < y {
				return -1, nil
			}
			return 1, nil
		}
	}
	return 0, nil
}
