package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/elector-sidecar/elector-sidecar/pkg/localapi"
	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// followHeading is the README section with the push snippets.
const followHeading = "Following leadership: long-poll and stream"

// TestReadmeFollowSnippetsSeeAHandoff runs the README's "Following
// leadership" snippets as written against a real follower: the `curl -N
// /watch` command, the Go stream client, the Python long-poll and the
// browser's EventSource (in Node). The Go, Python and JavaScript clients
// start before the sidecar serves them (each through a gate that drops
// their first connections, then forwards) and must retry; the JavaScript
// one then gets the 503 of a full waiter limit (the test holds every other
// slot of the follower) and must start over once slots are free. Each first
// shows the current state (another pod leads); when the leader is sent
// SIGTERM, each shows this pod leading with the next token. (The section's
// long-poll console command, which ends, runs in
// TestReadmeSnippetsRunAgainstARealSidecar.)
func TestReadmeFollowSnippetsSeeAHandoff(t *testing.T) {
	requireTools(t, "bash", "curl", "python3", "node")
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme := readmeDoc(t, root, "README.md")
	var watchCmd *readmeCommand
	var goCode, pyCode, jsCode string
	for _, b := range readme.blocks {
		if !b.Under(followHeading) {
			continue
		}
		switch b.Lang {
		case "console":
			for _, c := range framework.ConsoleCommands(b.Code) {
				if strings.Contains(c.Command, "/watch") {
					watchCmd = &readmeCommand{block: b, ConsoleCommand: c}
				}
			}
		case "go":
			goCode = b.Code
		case "python":
			pyCode = b.Code
		case "javascript":
			jsCode = b.Code
		}
	}
	if watchCmd == nil || goCode == "" || pyCode == "" || jsCode == "" {
		t.Fatalf("README.md: want a `curl ... /watch` console command, a go, a python and a javascript block under %q (blocks: %v)", followHeading, readme.where())
	}
	if !strings.Contains(jsCode, `addEventListener("leader"`) {
		t.Errorf("README.md's EventSource snippet does not listen for the \"leader\" event type")
	}

	g := newGroup(t, testTimings)
	cs := g.start("pod-a", "pod-b")
	leader, tok := g.waitLeader(startupTimeout)
	follower := cs[0]
	if follower == leader {
		follower = cs[1]
	}
	g.waitAllSee(leader, tok.Token)
	addr := follower.Spec.HTTPAddress
	pyGate, goGate, jsGate := newGate(t, addr), newGate(t, addr), newGate(t, addr)
	bin := buildFollowSnippet(t, root, localAPIAddr.ReplaceAllLiteralString(goCode, goGate.addr()))

	ctx, cancel := context.WithCancel(g.ctx)
	defer cancel()
	curl := startLines(t, ctx, "curl", "bash", "--noprofile", "--norc", "-c", localAPIAddr.ReplaceAllLiteralString(watchCmd.Command, addr))
	py := startLines(t, ctx, "python", "python3", "-u", "-c", followPythonPrelude+localAPIAddr.ReplaceAllLiteralString(pyCode, pyGate.addr()))
	if bin.err != nil {
		t.Fatalf("the Go snippet (the body of func follow(ctx) error) does not compile: %v\nsource:\n%s", bin.err, numbered(bin.source))
	}
	gos := startLines(t, ctx, "go", bin.path)
	js := startLines(t, ctx, "javascript", "node", "--experimental-eventsource", "--no-warnings", "-e",
		followJSPrelude+localAPIAddr.ReplaceAllLiteralString(jsCode, jsGate.addr()))

	// Not serving yet: each client's first two connections are dropped; it
	// must retry, and gets through once the gate opens.
	for _, c := range []struct {
		name string
		gate *gate
	}{{"python", pyGate}, {"go", goGate}, {"javascript", jsGate}} {
		g.waitFor(60*time.Second, "the "+c.name+" snippet to retry a sidecar that drops its connections", func(context.Context) error {
			if n := c.gate.dropped.Load(); n < 2 {
				return fmt.Errorf("%d connections so far", n)
			}
			return nil
		})
		if c.gate != jsGate {
			c.gate.open.Store(true)
		}
	}
	// The waiter limit: every slot of the follower taken, EventSource gets
	// a 503 (and gives up by itself); the snippet must start over.
	release := fillWatchers(t, ctx, addr)
	jsGate.open.Store(true)
	g.waitFor(60*time.Second, "the javascript snippet's /watch to answer 503", func(context.Context) error {
		if jsGate.got503.Load() == 0 {
			return errors.New("no 503 yet")
		}
		return nil
	})
	release()

	// The curl output is what the README shows, by shape.
	var first []string
	for len(first) < len(watchCmd.Output) {
		first = append(first, curl.next(t, 30*time.Second))
	}
	for i, want := range watchCmd.Output {
		if err := sseLineShape(want, first[i]); err != nil {
			t.Errorf("README.md line %d `$ %s` (on the follower): output line %d: %v\n got: %s\nwant: %s", watchCmd.line(), watchCmd.Command, i+1, err, first[i], want)
		}
	}
	var st localapi.LeaderResponse
	if err := json.Unmarshal([]byte(strings.TrimPrefix(first[len(first)-1], "data: ")), &st); err != nil || st.IsLeader || st.Holder != leader.Identity() {
		t.Fatalf("curl's first event on the follower: %+v (%v)", st, err)
	}
	// The Go and Python snippets report the current state first.
	wantFirst := "leader=false token=0"
	for _, c := range []*lineProc{gos, py, js} {
		if got := c.next(t, 60*time.Second); got != wantFirst {
			t.Fatalf("%s snippet's first report %q, want %q", c.name, got, wantFirst)
		}
	}

	if err := leader.Terminate(); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("leader=true token=%d", tok.Token+1)
	for _, c := range []*lineProc{gos, py, js} {
		c.waitFor(t, 30*time.Second, func(l string) bool { return l == want }, want)
	}
	curl.waitFor(t, 30*time.Second, func(l string) bool {
		var r localapi.LeaderResponse
		d, ok := strings.CutPrefix(l, "data: ")
		return ok && json.Unmarshal([]byte(d), &r) == nil && r.IsLeader && r.Token == tok.Token+1
	}, "a data line with isLeader true and token "+fmt.Sprint(tok.Token+1))
	// Each snippet follows with one stream: one that retried twice per
	// error (Node's EventSource fires error again on close()) would have
	// doubled its streams at every drop above.
	for _, c := range []struct {
		name string
		gate *gate
	}{{"python", pyGate}, {"go", goGate}, {"javascript", jsGate}} {
		g.waitFor(30*time.Second, "the "+c.name+" snippet to hold exactly one stream", func(context.Context) error {
			if n := c.gate.active.Load(); n != 1 {
				return fmt.Errorf("%d streams open", n)
			}
			return nil
		})
	}
}

// followPythonPrelude defines on_leadership for the Python snippet: it
// prints what it is told.
const followPythonPrelude = `
def on_leadership(is_leader, token):
    print("leader=%s token=%d" % ("true" if is_leader else "false", token or 0), flush=True)
`

// followJSPrelude defines onLeadership for the EventSource snippet.
const followJSPrelude = `
function onLeadership(isLeader, token) {
  console.log("leader=" + isLeader + " token=" + token);
}
`

// fillWatchers opens /watch streams on the sidecar at addr until one
// answers 503 (the waiter limit reached) and holds them; the function it
// returns closes them.
func fillWatchers(t *testing.T, ctx context.Context, addr string) func() {
	t.Helper()
	fctx, cancel := context.WithCancel(ctx)
	tr := &http.Transport{}
	hc := &http.Client{Transport: tr}
	var bodies []io.Closer
	release := func() {
		cancel()
		for _, b := range bodies {
			_ = b.Close()
		}
		tr.CloseIdleConnections()
	}
	for range 4096 {
		req, _ := http.NewRequestWithContext(fctx, http.MethodGet, "http://"+addr+"/watch", nil)
		resp, err := hc.Do(req)
		if err != nil {
			release()
			t.Fatalf("filling the waiter slots: GET /watch: %v", err)
		}
		if resp.StatusCode == http.StatusServiceUnavailable {
			_ = resp.Body.Close()
			t.Logf("the waiter limit reached after %d streams", len(bodies))
			return release
		}
		bodies = append(bodies, resp.Body)
	}
	release()
	t.Fatal("GET /watch never answered 503 after 4096 streams")
	return nil
}

// sseLineShape compares a line of the README's /watch output with the real
// one: the id by form, the event exactly, the data JSON by shape.
func sseLineShape(want, got string) error {
	switch {
	case strings.HasPrefix(want, "id: "):
		if !regexp.MustCompile(`^id: "[^"]+"$`).MatchString(got) {
			return fmt.Errorf("not an id line with a quoted ETag")
		}
		return nil
	case strings.HasPrefix(want, "data: "):
		d, ok := strings.CutPrefix(got, "data: ")
		if !ok {
			return fmt.Errorf("not a data line")
		}
		return sameShape(strings.TrimPrefix(want, "data: "), d)
	default:
		if want != got {
			return fmt.Errorf("the lines differ")
		}
		return nil
	}
}

// lineProc is a process whose non-empty stdout lines are read as they come.
type lineProc struct {
	name  string
	lines chan string
	cmd   *exec.Cmd
}

func startLines(t *testing.T, ctx context.Context, name string, argv ...string) *lineProc {
	t.Helper()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &lineProc{name: name, lines: make(chan string, 1024), cmd: cmd}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) != "" {
				p.lines <- sc.Text()
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		for range p.lines {
		}
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s stderr: %s", name, stderr.String())
		}
	})
	return p
}

func (p *lineProc) next(t *testing.T, timeout time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			t.Fatalf("%s ended", p.name)
		}
		return l
	case <-time.After(timeout):
		t.Fatalf("%s printed nothing within %v", p.name, timeout)
		return ""
	}
}

func (p *lineProc) waitFor(t *testing.T, timeout time.Duration, match func(string) bool, what string) {
	t.Helper()
	deadline := time.After(timeout)
	var seen []string
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("%s ended before %s; printed %q", p.name, what, seen)
			}
			if match(l) {
				return
			}
			seen = append(seen, l)
		case <-deadline:
			t.Fatalf("%s: no %s within %v; printed %q", p.name, what, timeout, seen)
		}
	}
}

const followGoHeader = `// Code generated by TestReadmeFollowSnippetsSeeAHandoff from README.md; removed after the build.

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/elector-sidecar/elector-sidecar/pkg/api"
	"github.com/elector-sidecar/elector-sidecar/pkg/localapi"
)

var (
	_ = bufio.NewScanner
	_ = json.Unmarshal
	_ = http.Get
	_ = strings.CutPrefix
	_ = localapi.LeaderResponse{}
	_ = api.LeaderResponse{}
	_ = time.After
	_ = fmt.Errorf
)

func onLeadership(isLeader bool, token int64) {
	fmt.Printf("leader=%v token=%d\n", isLeader, token)
}

func main() {
	if err := follow(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "follow:", err)
		os.Exit(1)
	}
}
`

// buildFollowSnippet compiles the Go snippet as the body of
// func follow(ctx context.Context) error, inside the module (as
// buildGoSnippets does).
func buildFollowSnippet(t *testing.T, root, code string) goBuild {
	t.Helper()
	src := followGoHeader + "\nfunc follow(ctx context.Context) error {\n" + code + "}\n"
	res := goBuild{path: filepath.Join(t.TempDir(), "readme-follow"), source: src}
	dir, err := os.MkdirTemp(filepath.Join(root, "test", "integration"), "_readme-follow-")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", res.path, "main.go")
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		res.err = fmt.Errorf("go build: %w\n%s", err, strings.TrimSpace(string(b)))
	}
	return res
}
