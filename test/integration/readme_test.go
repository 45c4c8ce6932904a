package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// The README's snippets, run as written against real elector-sidecar
// processes: the console commands of the intro and "Local API" (curl through
// bash), and the shell, Go and Python examples of "In your app" in README.md
// and in the chart README. One leader and one follower; localhost:4040 /
// 127.0.0.1:4040 become the right process's address (and $ELECTOR_URL its
// URL). Commands the README shows a follower's answer for ("# as a follower")
// run on the follower, everything else on the leader; POST /release runs last.
//
// Outputs are compared by shape, not value: the same lines, JSON with the same
// keys and value types (and the same booleans), other lines (status codes)
// exactly. Tools the snippets call that are not part of this tier are stubs:
// run-the-job, psql, and the Python `store`; the test checks they received the
// leader's token and were not called on the follower.
func TestReadmeSnippetsRunAgainstARealSidecar(t *testing.T) {
	requireTools(t, "bash", "curl", "python3")
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme := readmeDoc(t, root, "README.md")
	chart := readmeDoc(t, root, filepath.Join("charts", "elector-sidecar", "README.md"))

	// Console commands that talk to the local API: every one in "Local API",
	// plus those elsewhere in the README (the intro's /token).
	var commands []readmeCommand
	for _, b := range readme.blocks {
		if b.Lang != "console" {
			continue
		}
		for _, c := range framework.ConsoleCommands(b.Code) {
			talks := localAPIAddr.MatchString(c.Command)
			if b.Under("Local API") && !talks {
				t.Fatalf("README.md %s, command %q: does not call the local API on localhost:4040; this test cannot run it", b.Where(), c.Command)
			}
			if talks && strings.Contains(c.Command, "/watch") {
				continue // a stream never ends: TestReadmeFollowSnippetsSeeAHandoff runs it
			}
			if talks {
				commands = append(commands, readmeCommand{block: b, ConsoleCommand: c})
			}
		}
	}
	if n := countUnder(commands, "Local API"); n == 0 {
		t.Fatalf("README.md: no `$ curl ... localhost:4040` command in a console block under \"Local API\" (blocks: %v)", readme.where())
	}

	// The "In your app" snippets: one sh, one go and one python block in each README.
	var snippets []appSnippet
	for _, d := range []readmeFile{readme, chart} {
		for _, lang := range []string{"sh", "go", "python"} {
			var found []framework.CodeBlock
			for _, b := range d.blocks {
				if b.Under("In your app") && b.Lang == lang {
					found = append(found, b)
				}
			}
			if len(found) != 1 {
				t.Fatalf("%s: want one ```%s block under \"In your app\", found %d (blocks: %v)", d.name, lang, len(found), d.where())
			}
			snippets = append(snippets, appSnippet{doc: d.name, block: found[0], goFunc: fmt.Sprintf("snippet%d", len(snippets))})
		}
	}

	// Compile the Go snippets while the first election runs.
	goBin := buildGoSnippets(t, root, snippets)

	g := newGroup(t, testTimings)
	// A free Lease with a high count, as a release leaves it: the token is
	// then a distinctive number (4242), not 1, so finding it in the
	// snippets' output means something.
	transitions, duration := int32(readmeToken-1), int32(testTimings.LeaseDuration/time.Second)
	_, err = env.cp.Client.CoordinationV1().Leases(g.namespace).Create(g.ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: g.lease},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: new(string), LeaseTransitions: &transitions, LeaseDurationSeconds: &duration},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cs := g.start("pod-a", "pod-b")
	leader, tok := g.waitLeader(startupTimeout)
	follower := cs[0]
	if follower == leader {
		follower = cs[1]
	}
	if tok.Token != readmeToken {
		t.Fatalf("the first leader's token is %d, want %d: one above the free Lease's leaseTransitions", tok.Token, readmeToken)
	}
	g.waitAllSee(leader, tok.Token)
	t.Logf("leader %s (%s) token %d leaseUID %s; follower %s (%s)", leader.Instance, leader.Spec.HTTPAddress, tok.Token,
		tok.LeaseUID, follower.Instance, follower.Spec.HTTPAddress)
	r := &snippetRunner{t: t, ctx: g.ctx, leader: leader, follower: follower, token: tok.Token, leaseUID: tok.LeaseUID}

	var releases []readmeCommand
	for _, c := range commands {
		if strings.Contains(c.Command, "/release") {
			releases = append(releases, c)
			continue
		}
		r.console(c)
	}
	bin := <-goBin
	for _, s := range snippets {
		switch s.block.Lang {
		case "sh":
			r.shell(s)
		case "go":
			r.goSnippet(s, bin)
		case "python":
			r.python(s)
		}
	}
	// Last: the leader steps down.
	for _, c := range releases {
		r.console(c)
		rctx, cancel := context.WithTimeout(g.ctx, 2*time.Second)
		res := leader.Token(rctx)
		cancel()
		if res.Valid() {
			t.Errorf("README.md line %d %q: the leader still serves token %d after POST /release", c.line(), c.Command, res.Token)
		}
	}
}

// readmeToken is the token of the test's leader.
const readmeToken = 4242

// localAPIAddr is the sidecar's default address as the READMEs write it.
var localAPIAddr = regexp.MustCompile(`\b(localhost|127\.0\.0\.1):4040\b`)

type readmeFile struct {
	name   string
	blocks []framework.CodeBlock
}

func (d readmeFile) where() []string {
	var out []string
	for _, b := range d.blocks {
		out = append(out, b.Where())
	}
	return out
}

func readmeDoc(t *testing.T, root, rel string) readmeFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return readmeFile{name: rel, blocks: framework.MarkdownCodeBlocks(string(b))}
}

type readmeCommand struct {
	block framework.CodeBlock
	framework.ConsoleCommand
}

// line is the command's line in README.md.
func (c readmeCommand) line() int { return c.block.Line + c.Line }

func countUnder(cs []readmeCommand, heading string) int {
	n := 0
	for _, c := range cs {
		if c.block.Under(heading) {
			n++
		}
	}
	return n
}

type appSnippet struct {
	doc    string
	block  framework.CodeBlock
	goFunc string // the function the Go snippet becomes
}

func (s appSnippet) String() string { return s.doc + " " + s.block.Where() }

// requireTools skips the test if a tool is missing, except in CI (CI=true or
// ELECTOR_REQUIRE_APISERVER set, as hack/test.sh does), where it fails.
func requireTools(t *testing.T, tools ...string) {
	t.Helper()
	var missing []string
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) == 0 {
		return
	}
	msg := fmt.Sprintf("the README snippets need %s, not found in PATH", strings.Join(missing, ", "))
	if os.Getenv("ELECTOR_REQUIRE_APISERVER") != "" || os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true or ELECTOR_REQUIRE_APISERVER is set: this is a failure, not a skip)", msg)
	}
	t.Skip(msg)
}

// snippetRunner runs snippets against the leader and the follower.
type snippetRunner struct {
	t                *testing.T
	ctx              context.Context
	leader, follower *framework.Candidate
	token            int64
	leaseUID         string
}

// scriptResult is one run of a snippet.
type scriptResult struct {
	stdout, stderr string
	code           int
	record         []string // lines written to $README_RECORD by a stub; nil if it was not called
}

func (r scriptResult) String() string {
	return fmt.Sprintf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
}

// run runs argv with $ELECTOR_URL set to c's URL and $README_RECORD naming a
// fresh file for the stubs.
func (r *snippetRunner) run(c *framework.Candidate, argv ...string) scriptResult {
	r.t.Helper()
	record := filepath.Join(r.t.TempDir(), "record")
	ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(),
		"ELECTOR_URL="+c.URL,
		"README_RECORD="+record,
		// The sidecar is on loopback; a proxy from the environment must not intercept.
		"NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost",
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := scriptResult{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ctx.Err() == nil:
		res.code = ee.ExitCode()
	default:
		r.t.Fatalf("running %s: %v (stderr %q)", argv[0], err, res.stderr)
	}
	if b, err := os.ReadFile(record); err == nil {
		res.record = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	}
	return res
}

// rewrite points localhost:4040 / 127.0.0.1:4040 in code at c, and fails if
// the snippet reaches the sidecar neither that way nor through $ELECTOR_URL.
func (r *snippetRunner) rewrite(what, code string, c *framework.Candidate) string {
	r.t.Helper()
	if !localAPIAddr.MatchString(code) && !strings.Contains(code, "ELECTOR_URL") {
		r.t.Fatalf("%s: calls neither localhost:4040 / 127.0.0.1:4040 nor $ELECTOR_URL; this test cannot point it at a sidecar:\n%s", what, code)
	}
	return localAPIAddr.ReplaceAllLiteralString(code, c.Spec.HTTPAddress)
}

// runTheJobStub stands in for the README's run-the-job: it records its arguments.
const runTheJobStub = `run-the-job() { printf '%s\n' "$@" > "$README_RECORD"; }` + "\n"

// console runs one "$ ..." command with bash and compares its output with
// the README's by shape.
func (r *snippetRunner) console(c readmeCommand) {
	r.t.Helper()
	target := r.leader
	role := "leader"
	if strings.Contains(c.Command, "# as a follower") {
		target, role = r.follower, "follower"
	}
	what := fmt.Sprintf("README.md line %d `$ %s` (on the %s)", c.line(), c.Command, role)
	res := r.run(target, "bash", "--noprofile", "--norc", "-c", runTheJobStub+r.rewrite(what, c.Command, target))
	if res.code != 0 {
		r.t.Errorf("%s: %s", what, res)
		return
	}
	got := nonEmptyLines(res.stdout)
	if len(got) != len(c.Output) {
		r.t.Errorf("%s: printed %d lines, the README shows %d:\n got: %q\nwant: %q", what, len(got), len(c.Output), got, c.Output)
		return
	}
	for i := range got {
		if err := sameShape(c.Output[i], got[i]); err != nil {
			r.t.Errorf("%s: output line %d is not what the README shows: %v\n got: %s\nwant: %s", what, i+1, err, got[i], c.Output[i])
		}
	}
	if !strings.Contains(c.Command, "run-the-job") {
		return
	}
	// The job got the leader's token; on the follower it does not run.
	want := []string{"--fencing-token", strconv.FormatInt(r.token, 10)}
	if !containsSeq(res.record, want) {
		r.t.Errorf("%s: run-the-job got arguments %q, want them to include %q", what, res.record, want)
	}
	if role == "leader" {
		fres := r.run(r.follower, "bash", "--noprofile", "--norc", "-c", runTheJobStub+r.rewrite(what, c.Command, r.follower))
		if fres.record != nil {
			r.t.Errorf("README.md line %d `$ %s` on the follower: run-the-job ran with %q; it must not run without a token (%s)",
				c.line(), c.Command, fres.record, fres)
		}
	}
}

// psqlStub stands in for psql (PostgreSQL is not part of this tier): it records its arguments.
const psqlStub = `psql() { printf '%s\n' "$@" > "$README_RECORD"; }` + "\n"

// psqlCommand finds the SQL of the sh snippet's psql call.
var psqlCommand = regexp.MustCompile(`psql -c "([^"]*)"`)

// shell runs the sh snippet with bash and, if there is one, sh: on the leader
// it must hand psql SQL with the leader's token, on the follower exit 0
// without calling psql.
func (r *snippetRunner) shell(s appSnippet) {
	r.t.Helper()
	shells := []string{"bash"}
	if _, err := exec.LookPath("sh"); err == nil {
		shells = append(shells, "sh")
	}
	// The SQL psql must get: the snippet's, with $token the leader's token.
	tokenStr := strconv.FormatInt(r.token, 10)
	wantSQL := ""
	if m := psqlCommand.FindStringSubmatch(s.block.Code); m != nil {
		wantSQL = strings.NewReplacer("${token}", tokenStr, "$token", tokenStr).Replace(m[1])
	} else {
		r.t.Errorf("%s: no `psql -c \"...\"` line; this test checks the SQL it runs", s)
		return
	}
	for _, sh := range shells {
		for _, c := range []*framework.Candidate{r.leader, r.follower} {
			what := fmt.Sprintf("%s run by %s on the %s", s, sh, roleOf(c, r.leader))
			res := r.run(c, sh, "-c", psqlStub+r.rewrite(what, s.block.Code, c))
			switch {
			case res.code != 0:
				r.t.Errorf("%s: %s", what, res)
			case c == r.follower && res.record != nil:
				r.t.Errorf("%s: called psql with %q; without a token it must exit 0 first", what, res.record)
			case c == r.leader && (len(res.record) != 2 || res.record[0] != "-c" || res.record[1] != wantSQL):
				r.t.Errorf("%s: psql got arguments %q, want -c and the SQL with the leader's token %d: %q (%s)", what, res.record, r.token, wantSQL, res)
			case c == r.leader:
				r.t.Logf("%s: psql -c %q", what, res.record[1])
			}
		}
	}
}

// pythonPrelude defines what the Python snippet takes from its surroundings:
// `store` (recording its writes) and `value`.
const pythonPrelude = `import json as _readme_json, os as _readme_os

class _RecordingStore:
    def __init__(self):
        self.calls = []

    def write(self, value, fencing_token=None, **kwargs):
        self.calls.append({"value": value, "fencing_token": fencing_token})

store = _RecordingStore()
value = "readme-snippet-value"
`

const pythonPostlude = `
with open(_readme_os.environ["README_RECORD"], "w") as _readme_f:
    _readme_f.write(_readme_json.dumps(store.calls) + "\n")
`

// python runs the Python snippet: on the leader it must write with the
// leader's token, on the follower not write.
func (r *snippetRunner) python(s appSnippet) {
	r.t.Helper()
	for _, c := range []*framework.Candidate{r.leader, r.follower} {
		what := fmt.Sprintf("%s on the %s", s, roleOf(c, r.leader))
		res := r.run(c, "python3", "-c", pythonPrelude+r.rewrite(what, s.block.Code, c)+pythonPostlude)
		if res.code != 0 || len(res.record) != 1 {
			r.t.Errorf("%s: %s", what, res)
			continue
		}
		var calls []struct {
			Value        any         `json:"value"`
			FencingToken json.Number `json:"fencing_token"`
		}
		dec := json.NewDecoder(strings.NewReader(res.record[0]))
		dec.UseNumber()
		if err := dec.Decode(&calls); err != nil {
			r.t.Errorf("%s: store calls %q: %v", what, res.record[0], err)
			continue
		}
		switch {
		case c == r.follower && len(calls) != 0:
			r.t.Errorf("%s: called store.write %s; without a token it must not write", what, res.record[0])
		case c == r.leader && (len(calls) != 1 || calls[0].FencingToken.String() != strconv.FormatInt(r.token, 10)):
			r.t.Errorf("%s: store.write calls %s, want one with fencing_token=%d", what, res.record[0], r.token)
		}
	}
}

// goSnippet runs the compiled Go snippet: on the leader it must write
// through the fence with the leader's token and Lease UID, on the follower
// return without error and without writing.
func (r *snippetRunner) goSnippet(s appSnippet, bin goBuild) {
	r.t.Helper()
	if bin.err != nil {
		r.t.Errorf("%s: the Go snippets, each a function body with ctx, fence, payload and err, do not compile: %v\nsource:\n%s",
			s, bin.err, numbered(bin.source))
		return
	}
	for _, c := range []*framework.Candidate{r.leader, r.follower} {
		what := fmt.Sprintf("%s on the %s", s, roleOf(c, r.leader))
		r.rewrite(what, s.block.Code, c) // check it reaches the sidecar somehow
		res := r.run(c, bin.path, s.goFunc, c.Spec.HTTPAddress)
		if res.code != 0 {
			r.t.Errorf("%s: %s", what, res)
			continue
		}
		want := "wrote nothing"
		if c == r.leader {
			want = fmt.Sprintf("wrote token=%d leaseUID=%s", r.token, r.leaseUID)
		}
		if got := strings.TrimSpace(res.stdout); got != want {
			r.t.Errorf("%s: %q, want %q (%s)", what, got, want, res)
		}
	}
}

// goBuild is the compiled Go snippets (or why they did not compile).
type goBuild struct {
	path, source string
	err          error
}

// goSnippetHeader is the wrapper's package clause and imports; the blank
// uses keep it compiling if a snippet stops using one.
const goSnippetHeader = `// Code generated by TestReadmeSnippetsRunAgainstARealSidecar from the READMEs' Go snippets; removed after the build.

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/elector-sidecar/elector-sidecar/pkg/api"
	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
	"github.com/elector-sidecar/elector-sidecar/pkg/localapi"
)

var (
	_ = json.NewDecoder
	_ = http.Get
	_ = api.TokenResponse{}
	_ = localapi.TokenResponse{}
	_ = os.Getenv
	_ = time.After
)

// electorAddr replaces 127.0.0.1:4040 (os.Args[2]).
var electorAddr string
`

// goSnippetMain runs the snippet named by os.Args[1] with an in-memory fence
// and prints what reached the fence.
const goSnippetMain = `
func main() {
	electorAddr = os.Args[2]
	ctx := context.Background()
	store := fencing.NewMemory()
	fence := fencing.New(store)
	payload := []byte("readme-snippet-payload")
	run, ok := snippets[os.Args[1]]
	if !ok {
		fmt.Fprintln(os.Stderr, "no snippet", os.Args[1])
		os.Exit(2)
	}
	if err := run(ctx, fence, payload); err != nil {
		fmt.Fprintln(os.Stderr, "snippet error:", err)
		os.Exit(1)
	}
	tok, value, _, err := store.Load(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
	if value == nil {
		fmt.Println("wrote nothing")
		return
	}
	if string(value) != string(payload) {
		fmt.Fprintf(os.Stderr, "the fence holds %q, want the payload\n", value)
		os.Exit(1)
	}
	fmt.Printf("wrote token=%d leaseUID=%s\n", tok.Value, tok.LeaseUID)
}
`

// goSnippetSource wraps each Go snippet into a function
// func(ctx context.Context, fence *fencing.Fence, payload []byte) (err error)
// (the snippets declare resp, err with := and return early with a bare
// return), with 127.0.0.1:4040 in string literals replaced by electorAddr.
func goSnippetSource(snippets []appSnippet) string {
	var b strings.Builder
	b.WriteString(goSnippetHeader)
	var names []string
	for _, s := range snippets {
		if s.block.Lang != "go" {
			continue
		}
		names = append(names, s.goFunc)
		code := localAPIAddr.ReplaceAllLiteralString(s.block.Code, `" + electorAddr + "`)
		fmt.Fprintf(&b, "\n// %s\nfunc %s(ctx context.Context, fence *fencing.Fence, payload []byte) (err error) {\n%s\treturn err\n}\n",
			s, s.goFunc, code)
	}
	sort.Strings(names)
	b.WriteString("\nvar snippets = map[string]func(context.Context, *fencing.Fence, []byte) error{\n")
	for _, n := range names {
		fmt.Fprintf(&b, "\t%q: %s,\n", n, n)
	}
	b.WriteString("}\n")
	b.WriteString(goSnippetMain)
	if src, err := format.Source([]byte(b.String())); err == nil {
		return string(src)
	}
	return b.String() // the compiler reports the syntax error
}

// buildGoSnippets compiles the Go snippets in the background. The package is
// written to a directory inside the repository's module (so it builds with
// go.mod and go.sum as they are; the leading underscore keeps ./... patterns
// away from it) and removed right after the build.
func buildGoSnippets(t *testing.T, root string, snippets []appSnippet) <-chan goBuild {
	t.Helper()
	out := make(chan goBuild, 1)
	src := goSnippetSource(snippets)
	binDir := t.TempDir()
	dir, err := os.MkdirTemp(filepath.Join(root, "test", "integration"), "_readme-snippet-")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		<-done
		_ = os.RemoveAll(dir)
	})
	go func() {
		defer close(done)
		defer func() { _ = os.RemoveAll(dir) }()
		res := goBuild{path: filepath.Join(binDir, "readme-snippets"), source: src}
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
			res.err = err
			out <- res
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", res.path, "main.go")
		cmd.Dir = dir
		if b, err := cmd.CombinedOutput(); err != nil {
			res.err = fmt.Errorf("go build: %w\n%s", err, strings.TrimSpace(string(b)))
		}
		out <- res
	}()
	return out
}

// sameShape compares a line of the README's output with the real one: a
// JSON object or array by keys, value types and booleans (not numbers or
// strings: tokens, holders and times differ), a Prometheus sample by name,
// label names and value (not label values: the Lease's namespace differs),
// anything else (a status code) exactly.
func sameShape(want, got string) error {
	if w := promSample.FindStringSubmatch(want); w != nil {
		g := promSample.FindStringSubmatch(got)
		if g == nil {
			return errors.New("not a Prometheus sample")
		}
		labelNames := func(labels string) string { return promLabelValue.ReplaceAllString(labels, `=""`) }
		if w[1] != g[1] || labelNames(w[2]) != labelNames(g[2]) || w[3] != g[3] {
			return errors.New("the samples differ in name, label names or value")
		}
		return nil
	}
	var w any
	if t := strings.TrimSpace(want); !strings.HasPrefix(t, "{") && !strings.HasPrefix(t, "[") || json.Unmarshal([]byte(t), &w) != nil {
		if strings.TrimSpace(want) != strings.TrimSpace(got) {
			return errors.New("the lines differ")
		}
		return nil
	}
	var g any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		return fmt.Errorf("not JSON: %v", err)
	}
	return jsonShape("", w, g)
}

// promSample is a line of the Prometheus text format: name, labels, value.
var (
	promSample     = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$`)
	promLabelValue = regexp.MustCompile(`="(?:[^"\\]|\\.)*"`)
)

func jsonShape(path string, want, got any) error {
	typeName := func(v any) string {
		switch v.(type) {
		case map[string]any:
			return "object"
		case []any:
			return "array"
		case string:
			return "string"
		case float64:
			return "number"
		case bool:
			return "boolean"
		default:
			return "null"
		}
	}
	if typeName(want) != typeName(got) {
		return fmt.Errorf("%s is a %s, the README shows a %s", orTop(path), typeName(got), typeName(want))
	}
	switch w := want.(type) {
	case map[string]any:
		gm := got.(map[string]any)
		var missing, extra []string
		for k := range w {
			if _, ok := gm[k]; !ok {
				missing = append(missing, k)
			}
		}
		for k := range gm {
			if _, ok := w[k]; !ok {
				extra = append(extra, k)
			}
		}
		if len(missing)+len(extra) > 0 {
			sort.Strings(missing)
			sort.Strings(extra)
			return fmt.Errorf("%s: keys the README shows but the answer lacks: %q; keys the README does not show: %q", orTop(path), missing, extra)
		}
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if err := jsonShape(path+"."+k, w[k], gm[k]); err != nil {
				return err
			}
		}
	case []any:
		ga := got.([]any)
		if len(w) > 0 {
			for i := range ga {
				if err := jsonShape(fmt.Sprintf("%s[%d]", path, i), w[0], ga[i]); err != nil {
					return err
				}
			}
		}
	case bool:
		if w != got.(bool) {
			return fmt.Errorf("%s is %v, the README shows %v", orTop(path), got, w)
		}
	}
	return nil
}

func orTop(path string) string {
	if path == "" {
		return "the answer"
	}
	return strings.TrimPrefix(path, ".")
}

func nonEmptyLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

// containsSeq reports whether seq occurs in ss as consecutive elements.
func containsSeq(ss, seq []string) bool {
	for i := 0; i+len(seq) <= len(ss); i++ {
		match := true
		for j := range seq {
			if ss[i+j] != seq[j] {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

func roleOf(c, leader *framework.Candidate) string {
	if c == leader {
		return "leader"
	}
	return "follower"
}

func numbered(src string) string {
	var b strings.Builder
	for i, l := range strings.Split(src, "\n") {
		fmt.Fprintf(&b, "%4d  %s\n", i+1, l)
	}
	return b.String()
}
