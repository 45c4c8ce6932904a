// The repository's Dockerfile without a Docker engine: BuildKit's own parser and linter (what
// `docker build --check` runs), and the facts the image must keep.

package dockerfile

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/moby/buildkit/client/llb"
	"github.com/moby/buildkit/client/llb/sourceresolver"
	"github.com/moby/buildkit/frontend/dockerfile/dockerfile2llb"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerui"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
	digest "github.com/opencontainers/go-digest"
	ocispecs "github.com/opencontainers/image-spec/specs-go/v1"
)

// offlineResolver answers BuildKit's base-image lookups with a plain linux/amd64 config, so the lint
// never contacts a registry.
type offlineResolver struct{}

func (offlineResolver) ResolveImageConfig(_ context.Context, ref string, _ sourceresolver.Opt) (string, digest.Digest, []byte, error) {
	cfg := []byte(`{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]},"rootfs":{"type":"layers","diff_ids":[]}}`)
	return ref, digest.FromBytes(cfg), cfg, nil
}

func readDockerfile(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDockerfileLint runs BuildKit's build checks (docker build --check) on the Dockerfile: no warnings.
func TestDockerfileLint(t *testing.T) {
	dt := readDockerfile(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sm := llb.NewSourceMap(nil, "Dockerfile", "Dockerfile", dt)
	def, err := llb.Scratch().Marshal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sm.Definition = def
	res, err := dockerfile2llb.DockerfileLint(ctx, dt, dockerfile2llb.ConvertOpt{
		Config:         dockerui.Config{BuildArgs: map[string]string{"VERSION": "v1.2.3", "REVISION": "abc"}},
		TargetPlatform: &ocispecs.Platform{OS: "linux", Architecture: "amd64"},
		SourceMap:      sm,
		MetaResolver:   offlineResolver{},
	})
	if err != nil {
		t.Fatalf("lint: %v", err)
	}
	for _, w := range res.Warnings {
		t.Errorf("%s: %s (%s)", w.RuleName, w.Detail, w.URL)
	}
}

// TestDockerfileShape: multi-stage, static build with the version ldflags, a distroless nonroot `demo` stage
// with the demo programs, and the sidecar image as the final (default) stage with the sidecar alone,
// USER 65532:65532, the entrypoint and the labels hack/image.sh also sets.
func TestDockerfileShape(t *testing.T) {
	dt := readDockerfile(t)
	ast, err := parser.Parse(strings.NewReader(string(dt)))
	if err != nil {
		t.Fatal(err)
	}
	stages, _, err := instructions.Parse(ast.AST, linter.New(&linter.Config{ReturnAsError: true}))
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) != 3 || stages[1].Name != "demo" {
		t.Fatalf("%d stages, want 3 (build, demo, final)", len(stages))
	}
	final := stages[2]
	copied := func(st instructions.Stage) string {
		var srcs []string
		for _, c := range st.Commands {
			if c, ok := c.(*instructions.CopyCommand); ok {
				srcs = append(srcs, c.SourcePaths...)
			}
		}
		return strings.Join(srcs, " ")
	}
	if got := copied(final); got != "/out/elector-sidecar" {
		t.Errorf("the sidecar image copies %q, want /out/elector-sidecar alone (the demo programs go in the demo image)", got)
	}
	if got := copied(stages[1]); got != "/out/elector-demo /out/go-worker /out/elector-chart-test" {
		t.Errorf("the demo image copies %q", got)
	}
	if !strings.HasPrefix(stages[0].BaseName, "golang:1.26") {
		t.Errorf("build stage from %q, want golang:1.26", stages[0].BaseName)
	}
	for _, st := range stages[1:] {
		if !strings.HasPrefix(st.BaseName, "gcr.io/distroless/static-debian12:nonroot@") {
			t.Errorf("stage %q from %q, want gcr.io/distroless/static-debian12:nonroot@sha256:...", st.Name, st.BaseName)
		}
	}
	var run string
	for _, c := range stages[0].Commands {
		if r, ok := c.(*instructions.RunCommand); ok {
			run += strings.Join(r.CmdLine, " ") + "\n"
		}
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", ".:./cmd/elector-sidecar", "test:./cmd/elector-demo", ".:./examples/go-worker", "test:./cmd/elector-chart-test", `go -C "${mod}" build`} {
		if !strings.Contains(run, want) {
			t.Errorf("build RUN does not contain %q:\n%s", want, run)
		}
	}
	var user, entrypoint string
	labels := map[string]string{}
	for _, c := range final.Commands {
		switch c := c.(type) {
		case *instructions.UserCommand:
			user = c.User
		case *instructions.EntrypointCommand:
			entrypoint = strings.Join(c.CmdLine, " ")
		case *instructions.LabelCommand:
			for _, kv := range c.Labels {
				labels[kv.Key] = kv.Value
			}
		}
	}
	if user != "65532:65532" {
		t.Errorf("USER %q, want 65532:65532", user)
	}
	if entrypoint != "/elector-sidecar" {
		t.Errorf("ENTRYPOINT %q, want /elector-sidecar", entrypoint)
	}
	image, err := os.ReadFile(filepath.Join("..", "..", "image.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for k := range labels {
		if !strings.Contains(string(image), "--label \""+k+"=") {
			t.Errorf("label %s is in the Dockerfile but not set by hack/image.sh", k)
		}
	}
	for _, k := range []string{"org.opencontainers.image.title", "org.opencontainers.image.source", "org.opencontainers.image.version", "org.opencontainers.image.revision"} {
		if _, ok := labels[k]; !ok {
			t.Errorf("Dockerfile has no label %s", k)
		}
	}
}

// TestDockerignore: the build context keeps the Go module (go.mod, go.sum, cmd/, pkg/, internal/) and the
// demo app's corner of the test module, and leaves out what the image build does not need.
func TestDockerignore(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "..", "..", ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path     string
		excluded bool
	}{
		{"go.mod", false}, {"go.sum", false}, {"cmd/elector-sidecar/main.go", false}, {"test/cmd/elector-demo/main.go", false},
		{"test/cmd/elector-chart-test/main.go", false}, {"test/go.mod", false}, {"test/go.sum", false}, {"test/framework/process.go", true}, {"test/cmd/elector-bench/main.go", true},
		{"pkg/version/version.go", false}, {"internal/sidecar/run.go", false},
		{".git/HEAD", true}, {"_output/elector-sidecar-image.tar", true}, {"bin/elector-sidecar", true},
		{"charts/elector-sidecar/Chart.yaml", true}, {"test/chart/chart_test.go", true}, {"hack/tools/go.mod", true}, {"README.md", true},
	} {
		got, err := pm.MatchesOrParentMatches(tt.path)
		if err != nil {
			t.Fatal(err)
		}
		if got != tt.excluded {
			t.Errorf("%s: excluded=%v, want %v", tt.path, got, tt.excluded)
		}
	}
}

// TestDockerfilePinsEveryBaseImageByDigest: every FROM that names a registry image carries @sha256:<64 hex>, so
// a rebuild of a release cannot silently pick up a moved tag.
func TestDockerfilePinsEveryBaseImageByDigest(t *testing.T) {
	res, err := parser.Parse(strings.NewReader(string(readDockerfile(t))))
	if err != nil {
		t.Fatal(err)
	}
	stages, _, err := instructions.Parse(res.AST, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	n := 0
	for _, st := range stages {
		base := st.BaseName
		if !names[base] && base != "scratch" {
			n++
			_, dgst, ok := strings.Cut(base, "@")
			if !ok || !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(dgst) {
				t.Errorf("FROM %s (stage %q): not pinned by digest (NAME:TAG@sha256:...)", base, st.Name)
			}
		}
		names[st.Name] = true
	}
	if n < 2 {
		t.Errorf("checked %d base images, want the build and the runtime base at least", n)
	}
}
