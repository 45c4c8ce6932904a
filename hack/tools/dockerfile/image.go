// Package dockerfile checks the repository's Dockerfile without a Docker engine. Expect evaluates the
// Dockerfile's final stage offline (BuildKit's own parser and variable expansion, a table of what each
// base image provides) into the image it promises: config, labels and files, so the image that
// hack/image.sh builds without Docker can be compared with it.
package dockerfile

import (
	"fmt"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
)

// File is a path the image must hold.
type File struct {
	Path string
	Dir  bool
	// Mode: permission bits plus 01000 (sticky), as in a tar header; -1 when the Dockerfile keeps the
	// source's mode (COPY without --chmod).
	Mode     int64
	UID, GID int
	// Content, when not empty, is the file's exact content.
	Content string
	// Stage and Source: where COPY --from=Stage took it (empty for files of the base image).
	Stage, Source string
}

// Base is what a base image gives a stage built FROM it: the config it sets and the files apps rely on.
type Base struct {
	User       string
	WorkingDir string
	Env        []string
	Files      []File
}

// NonrootPasswd, NonrootGroup and NonrootNsswitch are the /etc/passwd, /etc/group and /etc/nsswitch.conf
// of gcr.io/distroless/static-debian12:nonroot (distroless common/BUILD.bazel, static/nsswitch.conf).
const (
	NonrootPasswd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	NonrootGroup = "root:x:0:\nnobody:x:65534:\ntty:x:5:\nstaff:x:50:\nnonroot:x:65532:\n"
	// NonrootNsswitchHosts is the line that matters to Go's resolver: /etc/hosts before DNS (without
	// the file, Go asks DNS first, as glibc does).
	NonrootNsswitchHosts = "hosts:          files dns"
)

// Bases: the base images the Dockerfile may use, and what the offline image must reproduce of each.
// distroless/static also carries tzdata, netbase (/etc/services, /etc/protocols), media-types,
// /etc/os-release, /usr/share/doc licences and dpkg status files; the sidecar needs none of them, and
// the offline image does not have them (README "Install in your cluster" says so).
var Bases = map[string]Base{
	"gcr.io/distroless/static-debian12:nonroot": {
		User:       "65532",
		WorkingDir: "/home/nonroot",
		Env: []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
		},
		Files: []File{
			{Path: "/etc/passwd", Mode: 0o644, Content: NonrootPasswd},
			{Path: "/etc/group", Mode: 0o644, Content: NonrootGroup},
			{Path: "/etc/nsswitch.conf", Mode: 0o644},
			{Path: "/etc/ssl/certs/ca-certificates.crt", Mode: 0o644},
			{Path: "/tmp", Dir: true, Mode: 0o1777},
			{Path: "/root", Dir: true, Mode: 0o700},
			{Path: "/home", Dir: true, Mode: 0o755},
			{Path: "/home/nonroot", Dir: true, Mode: 0o700, UID: 65532, GID: 65532},
		},
	},
}

// Image is what the Dockerfile's final stage promises.
type Image struct {
	Base       string
	User       string
	WorkingDir string
	Env        []string
	Entrypoint []string
	Cmd        []string
	Labels     map[string]string
	Files      []File // sorted by path
	// BuildRuns holds, per stage name, the command lines of its RUN instructions (not expanded: the
	// shell expands them at build time).
	BuildRuns map[string]string
	// LDFlags holds, per stage name, every distinct -ldflags "..." value of its RUN instructions,
	// expanded with the stage's ARG values.
	LDFlags map[string][]string
}

var ldflagsRE = regexp.MustCompile(`-ldflags\s+"([^"]*)"`)

// Expect evaluates the final stage of dockerfile with buildArgs (--build-arg values; TARGETOS and
// TARGETARCH too, as BuildKit sets them) into the image it promises.
func Expect(dockerfile []byte, buildArgs map[string]string) (*Image, error) {
	res, err := parser.Parse(strings.NewReader(string(dockerfile)))
	if err != nil {
		return nil, err
	}
	stages, metaArgs, err := instructions.Parse(res.AST, linter.New(&linter.Config{ReturnAsError: true}))
	if err != nil {
		return nil, err
	}
	if len(stages) == 0 {
		return nil, fmt.Errorf("no FROM")
	}
	lex := shell.NewLex(res.EscapeToken)
	// Global ARGs (before the first FROM) apply to FROM lines only, unless a stage declares them again.
	global := map[string]string{}
	for _, a := range metaArgs {
		for _, kv := range a.Args {
			global[kv.Key] = argValue(kv, buildArgs, global, lex)
		}
	}
	img := &Image{Labels: map[string]string{}, BuildRuns: map[string]string{}, LDFlags: map[string][]string{}}
	for _, st := range stages[:len(stages)-1] {
		if err := evalBuildStage(st, buildArgs, global, lex, img); err != nil {
			return nil, fmt.Errorf("stage %q: %w", st.Name, err)
		}
	}
	final := stages[len(stages)-1]
	if err := evalFinalStage(final, buildArgs, global, lex, stages, img); err != nil {
		return nil, fmt.Errorf("final stage: %w", err)
	}
	return img, nil
}

func argValue(kv instructions.KeyValuePairOptional, buildArgs, env map[string]string, lex *shell.Lex) string {
	if v, ok := buildArgs[kv.Key]; ok {
		return v
	}
	if kv.Value == nil {
		return ""
	}
	v, _, err := lex.ProcessWord(*kv.Value, shell.EnvsFromSlice(envSlice(env)))
	if err != nil {
		return *kv.Value
	}
	return v
}

func envSlice(m map[string]string) []string {
	var s []string
	for k, v := range m {
		s = append(s, k+"="+v)
	}
	sort.Strings(s)
	return s
}

func expander(lex *shell.Lex, env map[string]string) instructions.SingleWordExpander {
	return func(w string) (string, error) {
		v, _, err := lex.ProcessWord(w, shell.EnvsFromSlice(envSlice(env)))
		return v, err
	}
}

func evalBuildStage(st instructions.Stage, buildArgs, global map[string]string, lex *shell.Lex, img *Image) error {
	env := map[string]string{}
	var runs []string
	seen := map[string]bool{}
	for _, c := range st.Commands {
		switch c := c.(type) {
		case *instructions.ArgCommand:
			for _, kv := range c.Args {
				if v, ok := global[kv.Key]; ok && kv.Value == nil {
					env[kv.Key] = v
					if bv, ok := buildArgs[kv.Key]; ok {
						env[kv.Key] = bv
					}
					continue
				}
				env[kv.Key] = argValue(kv, buildArgs, env, lex)
			}
		case *instructions.EnvCommand:
			if err := c.Expand(expander(lex, env)); err != nil {
				return err
			}
			for _, kv := range c.Env {
				env[kv.Key] = kv.Value
			}
		case *instructions.RunCommand:
			line := strings.Join(c.CmdLine, " ")
			runs = append(runs, line)
			for _, m := range ldflagsRE.FindAllStringSubmatch(line, -1) {
				v, _, err := lex.ProcessWord(m[1], shell.EnvsFromSlice(envSlice(env)))
				if err != nil {
					return fmt.Errorf("-ldflags %q: %w", m[1], err)
				}
				if !seen[v] {
					seen[v] = true
					img.LDFlags[st.Name] = append(img.LDFlags[st.Name], v)
				}
			}
		}
	}
	img.BuildRuns[st.Name] = strings.Join(runs, "\n")
	return nil
}

func evalFinalStage(st instructions.Stage, buildArgs, global map[string]string, lex *shell.Lex, stages []instructions.Stage, img *Image) error {
	baseName, _, err := lex.ProcessWord(st.BaseName, shell.EnvsFromSlice(envSlice(global)))
	if err != nil {
		return err
	}
	// A base pinned by digest (NAME:TAG@sha256:...) provides what NAME:TAG does.
	baseName, _, _ = strings.Cut(baseName, "@")
	base, ok := Bases[baseName]
	if !ok {
		known := make([]string, 0, len(Bases))
		for k := range Bases {
			known = append(known, k)
		}
		sort.Strings(known)
		return fmt.Errorf("FROM %s: not a base image this check knows (%s); add what it provides to dockerfile.Bases and to hack/image.sh", baseName, strings.Join(known, ", "))
	}
	img.Base = baseName
	img.User = base.User
	img.WorkingDir = base.WorkingDir
	img.Env = append([]string(nil), base.Env...)
	files := map[string]File{}
	for _, f := range base.Files {
		files[f.Path] = f
	}
	stageNames := map[string]bool{}
	for _, s := range stages[:len(stages)-1] {
		stageNames[s.Name] = true
	}

	env := map[string]string{}
	for _, kv := range img.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	for _, c := range st.Commands {
		exp := expander(lex, env)
		switch c := c.(type) {
		case *instructions.ArgCommand:
			for _, kv := range c.Args {
				if v, ok := global[kv.Key]; ok && kv.Value == nil {
					env[kv.Key] = v
				} else {
					env[kv.Key] = argValue(kv, buildArgs, env, lex)
				}
			}
		case *instructions.EnvCommand:
			if err := c.Expand(exp); err != nil {
				return err
			}
			for _, kv := range c.Env {
				env[kv.Key] = kv.Value
				img.Env = setEnv(img.Env, kv.Key, kv.Value)
			}
		case *instructions.LabelCommand:
			if err := c.Expand(exp); err != nil {
				return err
			}
			for _, kv := range c.Labels {
				img.Labels[kv.Key] = kv.Value
			}
		case *instructions.UserCommand:
			if err := c.Expand(exp); err != nil {
				return err
			}
			img.User = c.User
		case *instructions.WorkdirCommand:
			if err := c.Expand(exp); err != nil {
				return err
			}
			img.WorkingDir = resolve(img.WorkingDir, c.Path)
		case *instructions.EntrypointCommand:
			img.Entrypoint = cmdLine(c.ShellDependantCmdLine)
			img.Cmd = nil // ENTRYPOINT resets the base image's CMD
		case *instructions.CmdCommand:
			img.Cmd = cmdLine(c.ShellDependantCmdLine)
		case *instructions.CopyCommand:
			if err := c.Expand(exp); err != nil {
				return err
			}
			if c.From != "" && !stageNames[c.From] {
				return fmt.Errorf("%s: --from=%s is not a stage of this Dockerfile", c.String(), c.From)
			}
			if len(c.SourceContents) > 0 {
				return fmt.Errorf("%s: here-documents are not modelled", c.String())
			}
			uid, gid, err := parseChown(c.Chown)
			if err != nil {
				return fmt.Errorf("%s: %w", c.String(), err)
			}
			mode := int64(-1)
			if c.Chmod != "" {
				m, err := strconv.ParseInt(c.Chmod, 8, 32)
				if err != nil {
					return fmt.Errorf("%s: --chmod=%s: want octal", c.String(), c.Chmod)
				}
				mode = m
			}
			dest := resolve(img.WorkingDir, c.DestPath)
			toDir := strings.HasSuffix(c.DestPath, "/") || len(c.SourcePaths) > 1
			for _, src := range c.SourcePaths {
				p := dest
				if toDir {
					p = path.Join(dest, path.Base(src))
				}
				files[p] = File{Path: p, Mode: mode, UID: uid, GID: gid, Stage: c.From, Source: src}
			}
		default:
			return fmt.Errorf("%s: not modelled by hack/tools/dockerfile (teach Expect and hack/image.sh, or drop it)", c.Name())
		}
	}
	for _, f := range files {
		img.Files = append(img.Files, f)
	}
	sort.Slice(img.Files, func(i, j int) bool { return img.Files[i].Path < img.Files[j].Path })
	return nil
}

func cmdLine(c instructions.ShellDependantCmdLine) []string {
	if c.PrependShell {
		return []string{"/bin/sh", "-c", strings.Join(c.CmdLine, " ")}
	}
	return append([]string(nil), c.CmdLine...)
}

func resolve(wd, p string) string {
	if !path.IsAbs(p) {
		if wd == "" {
			wd = "/"
		}
		p = path.Join(wd, p)
	}
	return path.Clean(p)
}

func setEnv(env []string, k, v string) []string {
	for i, kv := range env {
		if strings.HasPrefix(kv, k+"=") {
			env[i] = k + "=" + v
			return env
		}
	}
	return append(env, k+"="+v)
}

// parseChown parses COPY --chown's numeric uid[:gid] (names would need the base's /etc/passwd).
func parseChown(s string) (uid, gid int, err error) {
	if s == "" {
		return 0, 0, nil
	}
	u, g, hasGroup := strings.Cut(s, ":")
	if uid, err = strconv.Atoi(u); err != nil {
		return 0, 0, fmt.Errorf("--chown=%s: only numeric ids are modelled", s)
	}
	gid = uid
	if hasGroup {
		if gid, err = strconv.Atoi(g); err != nil {
			return 0, 0, fmt.Errorf("--chown=%s: only numeric ids are modelled", s)
		}
	}
	return uid, gid, nil
}
