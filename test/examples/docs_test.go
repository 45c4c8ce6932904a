package examples

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// The examples' READMEs show only what the failover test runs: their console
// commands and their one-time setup command are README.md's "Examples"
// commands, the shell README's SQL is the script's transaction, and
// examples/schema.sql creates the same table as go-worker's -setup.
func TestExampleReadmesShowTheCommandsTheTestsRun(t *testing.T) {
	root := repoRoot(t)
	known := map[string]bool{}
	for _, c := range readmeCommands(t) {
		known[c.Command] = true
	}
	setup := readmeCommand(t, "psql ")
	for _, name := range []string{"go-worker", "python-worker", "shell"} {
		checkExampleReadme(t, root, name, known, setup)
	}

	script := readRepoFile(t, "examples/shell/worker.sh")
	for _, blk := range framework.MarkdownCodeBlocks(readRepoFile(t, "examples/shell/README.md")) {
		if blk.Lang == "sql" && !strings.Contains(script, blk.Code) {
			t.Errorf("examples/shell/README.md %s: the SQL is not the transaction of worker.sh:\n%s", blk.Where(), blk.Code)
		}
	}

	_, goSchema, _ := strings.Cut(readRepoFile(t, "examples/go-worker/main.go"), "const Schema = `")
	goSchema, _, _ = strings.Cut(goSchema, "`")
	var sqlLines []string
	for _, l := range strings.Split(readRepoFile(t, "examples/schema.sql"), "\n") {
		if !strings.HasPrefix(l, "--") {
			sqlLines = append(sqlLines, l)
		}
	}
	norm := func(s string) string {
		return strings.Join(strings.Fields(strings.TrimSuffix(strings.TrimSpace(s), ";")), " ")
	}
	if got, want := norm(strings.Join(sqlLines, "\n")), norm(goSchema); goSchema == "" || got != want {
		t.Errorf("examples/schema.sql:\n%s\ngo-worker's Schema:\n%s", got, want)
	}
}

var onceCommand = regexp.MustCompile("Once: `([^`]+)`")

// checkExampleReadme checks examples/<name>/README.md: its console commands
// are among known (README.md's "Examples" commands) and its "Once:" setup
// command is setup.
func checkExampleReadme(t *testing.T, root, name string, known map[string]bool, setup string) {
	t.Helper()
	path := filepath.Join("examples", name, "README.md")
	b, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, blk := range framework.MarkdownCodeBlocks(string(b)) {
		if blk.Lang != "console" {
			continue
		}
		for _, c := range framework.ConsoleCommands(blk.Code) {
			n++
			if !known[c.Command] {
				t.Errorf("%s %s: %q is not one of README.md's \"Examples\" commands (which the tests run)", path, blk.Where(), c.Command)
			}
		}
	}
	if n == 0 {
		t.Errorf("%s: no console command", path)
	}
	for _, m := range onceCommand.FindAllStringSubmatch(string(b), -1) {
		if m[1] != setup {
			t.Errorf("%s: setup command %q, README.md runs %q", path, m[1], setup)
		}
	}
}

func readRepoFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
