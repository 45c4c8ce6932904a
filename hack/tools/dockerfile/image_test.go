package dockerfile

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// TestDockerfileLDFlagsMatchMakefile: every binary of the Dockerfile gets the Makefile's LDFLAGS
// (VERSION and REVISION stamped into pkg/version), with the build args in place of make's variables.
func TestDockerfileLDFlagsMatchMakefile(t *testing.T) {
	args := map[string]string{"VERSION": "v1.2.3", "REVISION": "0123abc", "TARGETOS": "linux", "TARGETARCH": "amd64"}
	img, err := Expect(readDockerfile(t), args)
	if err != nil {
		t.Fatal(err)
	}
	mk, err := os.ReadFile(filepath.Join("..", "..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^LDFLAGS\s*:?=\s*(.*)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile has no LDFLAGS := line")
	}
	want := regexp.MustCompile(`\$\((\w+)\)`).ReplaceAllStringFunc(string(m[1]), func(v string) string {
		return args[strings.TrimSuffix(strings.TrimPrefix(v, "$("), ")")]
	})
	if got := img.LDFlags["build"]; !reflect.DeepEqual(got, []string{want}) {
		t.Errorf("Dockerfile build stage -ldflags = %q, want exactly the Makefile's %q", got, want)
	}
}

// TestExpectEvaluatesTheFinalStage: base config and files, ARG defaults and --build-arg values in
// LABEL/USER/WORKDIR/ENV, COPY into a directory, and ENTRYPOINT resetting the base's CMD.
func TestExpectEvaluatesTheFinalStage(t *testing.T) {
	df := `ARG BASE=gcr.io/distroless/static-debian12:nonroot
FROM golang:1.26 AS build
ARG VERSION=dev
RUN go build -ldflags "-X main.v=${VERSION}" -o /out/a ./a && go build -ldflags "-X main.v=${VERSION}" -o /out/b ./b
FROM ${BASE}
ARG VERSION=dev
ARG NAME=app
ENV APP_NAME=${NAME}
LABEL a.version="${VERSION}" a.name=$NAME
WORKDIR data
COPY --from=build --chmod=0555 /out/a /out/b /bin/
COPY --from=build --chown=1:2 /out/a /single
CMD ["--help"]
USER ${NAME}
ENTRYPOINT ["/bin/a"]
`
	img, err := Expect([]byte(df), map[string]string{"VERSION": "v9"})
	if err != nil {
		t.Fatal(err)
	}
	if img.Base != "gcr.io/distroless/static-debian12:nonroot" || img.User != "app" || img.WorkingDir != "/home/nonroot/data" {
		t.Errorf("base %q user %q workdir %q", img.Base, img.User, img.WorkingDir)
	}
	if !reflect.DeepEqual(img.Labels, map[string]string{"a.version": "v9", "a.name": "app"}) {
		t.Errorf("labels = %v", img.Labels)
	}
	if !reflect.DeepEqual(img.Entrypoint, []string{"/bin/a"}) || img.Cmd != nil {
		t.Errorf("entrypoint %q cmd %q: want [/bin/a] and no CMD (ENTRYPOINT after CMD resets it)", img.Entrypoint, img.Cmd)
	}
	if want := append(Bases[img.Base].Env[:2:2], "APP_NAME=app"); !reflect.DeepEqual(img.Env, want) {
		t.Errorf("env = %q, want %q", img.Env, want)
	}
	if got := img.LDFlags["build"]; !reflect.DeepEqual(got, []string{"-X main.v=v9"}) {
		t.Errorf("ldflags = %q, want one distinct value", got)
	}
	files := map[string]File{}
	for _, f := range img.Files {
		files[f.Path] = f
	}
	for _, want := range []File{
		{Path: "/bin/a", Mode: 0o555, Stage: "build", Source: "/out/a"},
		{Path: "/bin/b", Mode: 0o555, Stage: "build", Source: "/out/b"},
		{Path: "/single", Mode: -1, UID: 1, GID: 2, Stage: "build", Source: "/out/a"},
		{Path: "/etc/passwd", Mode: 0o644, Content: NonrootPasswd},
		{Path: "/tmp", Dir: true, Mode: 0o1777},
	} {
		if got := files[want.Path]; got != want {
			t.Errorf("%s = %+v, want %+v", want.Path, got, want)
		}
	}
}

func TestExpectRejectsWhatItCannotCompare(t *testing.T) {
	for _, tt := range []struct{ name, dockerfile, want string }{
		{"unknown base", "FROM alpine:3\nUSER 1\n", `FROM alpine:3: not a base image this check knows`},
		{"unmodelled instruction", "FROM gcr.io/distroless/static-debian12:nonroot\nEXPOSE 4040\n", "EXPOSE: not modelled"},
		{"copy from a missing stage", "FROM gcr.io/distroless/static-debian12:nonroot\nCOPY --from=nope /a /a\n", "--from=nope is not a stage"},
		{"named chown", "FROM golang AS b\nFROM gcr.io/distroless/static-debian12:nonroot\nCOPY --from=b --chown=nonroot /a /a\n", "only numeric ids"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Expect([]byte(tt.dockerfile), nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}
