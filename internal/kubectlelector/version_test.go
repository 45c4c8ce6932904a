package kubectlelector

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/elector-sidecar/elector-sidecar/pkg/version"
)

func TestVersionPrintsTheReleaseVersion(t *testing.T) {
	saved, savedRev := version.Version, version.Revision
	defer func() { version.Version, version.Revision = saved, savedRev }()
	version.Version, version.Revision = "0.2.0", "abc123"
	var out, errOut bytes.Buffer
	code := Run(context.Background(), []string{"version"}, genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}, Deps{})
	if want := "kubectl-elector 0.2.0 (revision abc123, " + runtime.Version() + ")\n"; code != 0 || out.String() != want {
		t.Errorf("exit %d, stdout %q (stderr %q), want %q", code, out.String(), errOut.String(), want)
	}
	if code := Run(context.Background(), []string{"version", "extra"}, genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}, Deps{}); code != 2 {
		t.Errorf("version with an argument: exit %d, want 2", code)
	}
}
