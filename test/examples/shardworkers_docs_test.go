package examples

import "testing"

// The shard workers' READMEs show only what the shard test runs: their
// console commands are README.md's "Examples" commands and their setup
// command is README.md's.
func TestShardWorkerReadmesShowTheCommandsTheTestsRun(t *testing.T) {
	known := map[string]bool{}
	for _, c := range readmeCommands(t) {
		known[c.Command] = true
	}
	for _, name := range []string{"go-shard-worker", "python-shard-worker"} {
		checkExampleReadme(t, repoRoot(t), name, known, readmeCommand(t, "psql "))
	}
}

// TestPythonShardWorkerRequirementsNameEveryImport: examples/python-shard-worker/
// requirements.txt names every package its worker.py imports beyond the
// standard library, in a version the tested Python has.
func TestPythonShardWorkerRequirementsNameEveryImport(t *testing.T) {
	checkPythonRequirements(t, "python-shard-worker")
}
