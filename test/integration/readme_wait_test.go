package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// TestReadmeAppSnippetsWaitForASidecarNotServingYet: README.md's Go and
// Python "In your app" snippets, started before the sidecar serves them
// (the app container often starts first), retry with a pause instead of
// failing or skipping the write: each reaches the leader through a gate
// that drops its first two connections, then forwards, and writes with the
// leader's token.
func TestReadmeAppSnippetsWaitForASidecarNotServingYet(t *testing.T) {
	requireTools(t, "python3")
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme := readmeDoc(t, root, "README.md")
	var snippets []appSnippet
	var pyCode string
	for _, b := range readme.blocks {
		if !b.Under("In your app") {
			continue
		}
		switch b.Lang {
		case "go":
			snippets = append(snippets, appSnippet{doc: readme.name, block: b, goFunc: "snippetWait"})
		case "python":
			pyCode = b.Code
		}
	}
	if len(snippets) != 1 || pyCode == "" {
		t.Fatalf("README.md: want one go and one python block under \"In your app\" (blocks: %v)", readme.where())
	}
	build := buildGoSnippets(t, root, snippets)

	g := newGroup(t, testTimings)
	g.start("pod-a")
	leader, tok := g.waitLeader(startupTimeout)

	bin := <-build
	if bin.err != nil {
		t.Fatalf("the Go snippet does not compile: %v\nsource:\n%s", bin.err, numbered(bin.source))
	}
	goGate, pyGate := newGate(t, leader.Spec.HTTPAddress), newGate(t, leader.Spec.HTTPAddress)
	record := filepath.Join(t.TempDir(), "record")
	start := func(name string, gt *gate, argv ...string) (*exec.Cmd, *bytes.Buffer) {
		cmd := exec.CommandContext(g.ctx, argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), "README_RECORD="+record, "ELECTOR_URL=http://"+gt.addr(),
			"NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatalf("start the %s snippet: %v", name, err)
		}
		return cmd, &out
	}
	goCmd, goOut := start("go", goGate, bin.path, "snippetWait", goGate.addr())
	pyCmd, pyOut := start("python", pyGate, "python3", "-c",
		pythonPrelude+localAPIAddr.ReplaceAllLiteralString(pyCode, pyGate.addr())+pythonPostlude)
	for _, c := range []struct {
		name string
		gate *gate
	}{{"go", goGate}, {"python", pyGate}} {
		g.waitFor(60*time.Second, "the "+c.name+" snippet to retry a sidecar that drops its connections", func(context.Context) error {
			if n := c.gate.dropped.Load(); n < 2 {
				return fmt.Errorf("%d connections so far", n)
			}
			return nil
		})
		c.gate.open.Store(true)
	}
	if err := goCmd.Wait(); err != nil {
		t.Fatalf("the Go snippet: %v: %s", err, goOut)
	}
	if want := fmt.Sprintf("wrote token=%d leaseUID=%s", tok.Token, tok.LeaseUID); strings.TrimSpace(goOut.String()) != want {
		t.Errorf("the Go snippet printed %q, want %q", goOut, want)
	}
	if err := pyCmd.Wait(); err != nil {
		t.Fatalf("the Python snippet: %v: %s", err, pyOut)
	}
	b, err := os.ReadFile(record)
	if err != nil {
		t.Fatalf("the Python snippet wrote no record: %v (%s)", err, pyOut)
	}
	var calls []struct {
		FencingToken int64 `json:"fencing_token"`
	}
	if err := json.Unmarshal(b, &calls); err != nil || len(calls) != 1 || calls[0].FencingToken != tok.Token {
		t.Errorf("the Python snippet's store.write calls %s (%v), want one with fencing_token=%d", b, err, tok.Token)
	}
}
