// Command mkimage writes a single-layer container image tarball without a container engine.
//
// The image is built on an empty base (like FROM scratch) from local files, with the given
// entrypoint, user, labels and environment, and written in the `docker save` tarball format
// (manifest.json + config + layers), which `docker load`, `ctr images import` and
// `kind load image-archive` all accept.
//
// Example (what hack/image.sh runs):
//
//	mkimage --file _output/bin/elector-sidecar:/elector-sidecar \
//	        --file _output/bin/elector-demo:/elector-demo \
//	        --dir /tmp:1777 --entrypoint /elector-sidecar --user 65532:65532 \
//	        --label org.opencontainers.image.version=v1.2.3 \
//	        --tag elector-sidecar:v1.2.3 --out _output/elector-sidecar-image.tar
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"
)

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

func run(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		files, dirs, labels, envs, tags, entrypoint, cmd stringList
		spec                                             Spec
		created                                          string
	)
	fs.Var(&files, "file", "`src:dst[:mode]` add local file src at absolute path dst (mode octal, default: 0755 if src is executable, else 0644); repeatable")
	fs.Var(&dirs, "dir", "`path[:mode[:uid:gid]]` add an empty directory (mode octal, default 0755, owner default 0:0; e.g. /tmp:1777, /home/nonroot:0700:65532:65532); repeatable")
	fs.Var(&entrypoint, "entrypoint", "entrypoint `argument`; repeat for more arguments")
	fs.Var(&cmd, "cmd", "default command `argument` (after the entrypoint); repeatable")
	fs.StringVar(&spec.User, "user", "", "user the container runs as, e.g. 65532:65532")
	fs.StringVar(&spec.WorkingDir, "workdir", "", "working directory")
	fs.Var(&labels, "label", "`key=value` image label; repeatable")
	fs.Var(&envs, "env", "`KEY=value` environment variable; repeatable")
	fs.Var(&tags, "tag", "image `reference` written into the tarball, e.g. elector-sidecar:dev; repeatable (at least one)")
	fs.StringVar(&spec.OS, "os", "linux", "image OS")
	fs.StringVar(&spec.Arch, "arch", runtime.GOARCH, "image architecture (must match the binaries)")
	fs.StringVar(&created, "created", "", "image creation time (RFC 3339); default: $SOURCE_DATE_EPOCH, else the Unix epoch (reproducible)")
	fs.StringVar(&spec.Out, "out", "", "output tarball `path` (required)")
	fs.StringVar(&spec.Format, "format", "docker", "output `format`: docker (`docker save`) or oci (an OCI image layout in one tar)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}

	for _, f := range files {
		e, err := parseFile(f)
		if err != nil {
			return fmt.Errorf("%w: --file: %v", errUsage, err)
		}
		spec.Files = append(spec.Files, e)
	}
	for _, d := range dirs {
		e, err := parseDir(d)
		if err != nil {
			return fmt.Errorf("%w: --dir: %v", errUsage, err)
		}
		spec.Dirs = append(spec.Dirs, e)
	}
	spec.Labels = map[string]string{}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return fmt.Errorf("%w: --label %q: want key=value", errUsage, l)
		}
		spec.Labels[k] = v
	}
	for _, e := range envs {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return fmt.Errorf("%w: --env %q: want KEY=value", errUsage, e)
		}
	}
	spec.Env = envs
	spec.Entrypoint = entrypoint
	spec.Cmd = cmd
	spec.Tags = tags
	t, err := parseCreated(created, os.Getenv("SOURCE_DATE_EPOCH"))
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	spec.Created = t
	if spec.Out == "" {
		return fmt.Errorf("%w: --out is required", errUsage)
	}
	if spec.Format != "docker" && spec.Format != "oci" {
		return fmt.Errorf("%w: --format %q: want docker or oci", errUsage, spec.Format)
	}
	if len(spec.Tags) == 0 {
		return fmt.Errorf("%w: at least one --tag is required", errUsage)
	}
	return Build(spec)
}

func parseCreated(flagValue, sourceDateEpoch string) (time.Time, error) {
	switch {
	case flagValue != "":
		t, err := time.Parse(time.RFC3339, flagValue)
		if err != nil {
			return time.Time{}, fmt.Errorf("--created: %v", err)
		}
		return t.UTC(), nil
	case sourceDateEpoch != "":
		var secs int64
		if _, err := fmt.Sscanf(sourceDateEpoch, "%d", &secs); err != nil {
			return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: not a number of seconds", sourceDateEpoch)
		}
		return time.Unix(secs, 0).UTC(), nil
	default:
		return time.Unix(0, 0).UTC(), nil
	}
}
