package examples

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// examples/kube-object: the README's two commands (shell: curl /token and
// kubectl; Python: the standard library as the ServiceAccount config/fence/role
// grants) run as written next to a real leader, with config/fence applied to
// the real API server. Each writes the ConfigMap with the leader's token; after
// a newer token was stamped on it (a newer leader's write), each is rejected
// with exit status 3, naming both tokens, and the ConfigMap keeps the newer write.
func TestKubeObjectExamplesWriteThroughTheFence(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	root := repoRoot(t)
	kubectl := filepath.Join(framework.CacheBinDir(), "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Fatalf("no %s: run hack/build-binaries.sh", kubectl)
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", env.cp.Kubeconfig}, args...)...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	// The fence (cluster-scoped) and the app's Role, from config/, in namespace default.
	run("apply", "--server-side", "-k", "config/fence")
	t.Cleanup(func() {
		_ = exec.Command(kubectl, "--kubeconfig", env.cp.Kubeconfig, "delete", "-k", filepath.Join(root, "config", "fence")).Run()
	})
	run("apply", "--server-side", "-n", "default", "-k", "config/fence/role")
	cms := env.cp.Client.CoreV1().ConfigMaps("default")
	probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe", Labels: map[string]string{"elector-sidecar.io/fenced": "true"}}}
	waitFor(t, ctx, 30*time.Second, "config/fence to reject a ConfigMap without a token", func(ctx context.Context) error {
		_, err := cms.Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if !apierrors.IsForbidden(err) {
			return fmt.Errorf("dry-run create without a token: %v", err)
		}
		return nil
	})

	// The Python example authenticates as the ServiceAccount elector-sidecar.
	sas := env.cp.Client.CoreV1().ServiceAccounts("default")
	if _, err := sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "elector-sidecar"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tr, err := sas.CreateToken(ctx, "elector-sidecar", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tokenFile, caFile := filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(tokenFile, []byte(tr.Status.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caFile, env.cp.Config.CAData, 0o600); err != nil {
		t.Fatal(err)
	}

	ns, err := env.cp.CreateNamespace(ctx, "ex-kube-object")
	if err != nil {
		t.Fatal(err)
	}
	g := framework.NewGroup(framework.CandidateSpec{
		Kind: framework.KindSidecar, Binary: env.sidecarBin, LeaseName: "writer", Namespace: ns,
		Kubeconfig: env.cp.Kubeconfig, Timings: timings, LogDir: filepath.Join(env.logDir, t.Name()),
	})
	t.Cleanup(func() {
		g.Sampler.Stop()
		g.StopAll(3 * time.Second)
	})
	if _, err := g.Start(ctx, "pod-a"); err != nil {
		t.Fatal(err)
	}
	leader, tok, err := g.WaitForLeader(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}

	var commands []string
	for _, blk := range framework.MarkdownCodeBlocks(readRepoFile(t, "examples/kube-object/README.md")) {
		for _, c := range framework.ConsoleCommands(blk.Code) {
			commands = append(commands, c.Command)
		}
	}
	if len(commands) != 2 {
		t.Fatalf("examples/kube-object/README.md: %d console commands, want the shell and the Python one", len(commands))
	}
	for i, command := range commands {
		name := fmt.Sprintf("kube-object-plan-%d", i)
		envv := append(os.Environ(), "ELECTOR_URL="+leader.URL, "NAME="+name, "NAMESPACE=default",
			"KUBECONFIG="+env.cp.Kubeconfig, "PATH="+framework.CacheBinDir()+":"+os.Getenv("PATH"),
			"KUBE_API_URL="+env.cp.Config.Host, "KUBE_TOKEN_FILE="+tokenFile, "KUBE_CA_FILE="+caFile)
		exec1 := func() (int, string) {
			cmd := exec.CommandContext(ctx, "bash", "-c", command)
			cmd.Dir, cmd.Env = root, envv
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				return exit.ExitCode(), string(out)
			} else if err != nil {
				t.Fatalf("%s: %v", command, err)
			}
			return 0, string(out)
		}
		if code, out := exec1(); code != 0 || !strings.Contains(out, fmt.Sprintf("written with fencing token %d", tok.Token)) {
			t.Fatalf("%s as the leader (token %d): exit %d\n%s", command, tok.Token, code, out)
		}
		cm, err := cms.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := cm.Annotations["elector-sidecar.io/fencing-token"]; got != fmt.Sprint(tok.Token) || cm.Data["plan"] != "plan 7" {
			t.Fatalf("%s wrote token %q, plan %q", command, got, cm.Data["plan"])
		}
		// A newer leader writes: the next token.
		newer := tok.Token + 1
		cm.Annotations["elector-sidecar.io/fencing-token"] = fmt.Sprint(newer)
		cm.Data["plan"] = "newer"
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		code, out := exec1()
		if code != 3 || !strings.Contains(out, fmt.Sprint(tok.Token)) || !strings.Contains(out, fmt.Sprint(newer)) {
			t.Fatalf("%s with token %d after %d: exit %d, want 3 naming both tokens\n%s", command, tok.Token, newer, code, out)
		}
		after, err := cms.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if after.Data["plan"] != "newer" || after.Annotations["elector-sidecar.io/fencing-token"] != fmt.Sprint(newer) {
			t.Fatalf("the rejected write changed the ConfigMap: %v %v", after.Annotations, after.Data)
		}
		t.Logf("%s: written with token %d, then rejected after token %d: %s", command, tok.Token, newer, strings.TrimSpace(out))
		_ = cms.Delete(ctx, name, metav1.DeleteOptions{})
	}
}
