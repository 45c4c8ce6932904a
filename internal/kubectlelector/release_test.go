package kubectlelector

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

func pod(ns, name string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Status: corev1.PodStatus{Phase: phase}}
}

// sidecarStub is the local API of the holder's pod, reached through Deps.Forward.
type sidecarStub struct {
	mu       sync.Mutex
	requests []string // "POST /release?for=10m0s"
	status   int
	body     string
	forwards []string // "ns/pod:port"
	stopped  int
}

func (s *sidecarStub) deps(t *testing.T, client kubernetes.Interface) Deps {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests = append(s.requests, r.Method+" "+r.URL.RequestURI())
		s.mu.Unlock()
		if s.body != "" {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(s.status)
		_, _ = w.Write([]byte(s.body))
	}))
	t.Cleanup(srv.Close)
	return Deps{
		NewClient: func(*genericclioptions.ConfigFlags) (kubernetes.Interface, error) { return client, nil },
		Clock:     clocktesting.NewFakePassiveClock(now),
		Forward: func(_ context.Context, _ *genericclioptions.ConfigFlags, ns, pod string, port int) (string, func(), error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.forwards = append(s.forwards, ns+"/"+pod+":"+strconv.Itoa(port))
			return srv.URL, func() { s.mu.Lock(); s.stopped++; s.mu.Unlock() }, nil
		},
	}
}

func runRelease(t *testing.T, client kubernetes.Interface, s *sidecarStub, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	args = append([]string{"--kubeconfig", kubeconfig(t)}, args...)
	code := Run(context.Background(), args, genericiooptions.IOStreams{In: strings.NewReader(""), Out: &stdout, ErrOut: &stderr}, s.deps(t, client))
	return result{stdout: stdout.String(), stderr: stderr.String(), code: code}
}

func releaseObjects(phase corev1.PodPhase) []runtime.Object {
	return append(objects(), pod("team", "pod-a", phase))
}

func TestReleasePostsToTheHolderPodsSidecar(t *testing.T) {
	for _, tc := range []struct {
		name        string
		args        []string
		wantForward string
		wantRequest string
		wantOut     string
	}{
		{"the holder, default port", []string{"release", "nightly-run"}, "team/pod-a:4040", "POST /release",
			"lease team/nightly-run: pod pod-a released (the Lease was at token 7)\n"},
		{"--for and --port", []string{"release", "nightly-run", "-n", "team", "--for=10m", "--port=8080"}, "team/pod-a:8080", "POST /release?for=10m0s",
			"lease team/nightly-run: pod pod-a released (the Lease was at token 7); it stays out of the election for 10m0s\n"},
		{"--pod names another pod of a free Lease", []string{"release", "free", "--pod=pod-a"}, "team/pod-a:4040", "POST /release",
			"lease team/free: pod pod-a released (the Lease was at token 8)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &sidecarStub{status: http.StatusNoContent}
			r := runRelease(t, fake.NewClientset(releaseObjects(corev1.PodRunning)...), s, tc.args...)
			if r.code != ExitOK || r.stderr != "" || r.stdout != tc.wantOut {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 0 and %q", r.code, r.stdout, r.stderr, tc.wantOut)
			}
			if strings.Join(s.forwards, ",") != tc.wantForward || strings.Join(s.requests, ",") != tc.wantRequest || s.stopped != 1 {
				t.Errorf("forwards %v requests %v stopped %d; want %s, %s, stopped once", s.forwards, s.requests, s.stopped, tc.wantForward, tc.wantRequest)
			}
		})
	}
}

func TestReleaseErrors(t *testing.T) {
	for _, tc := range []struct {
		name      string
		phase     corev1.PodPhase
		status    int
		body      string
		args      []string
		code      int
		stderr    string
		noAPI     bool
		noRequest bool
	}{
		{name: "a free Lease", phase: corev1.PodRunning, args: []string{"release", "free"}, code: ExitError, noRequest: true,
			stderr: "error: lease team/free is free: no holder to release (token 8)\n"},
		{name: "a missing Lease", phase: corev1.PodRunning, args: []string{"release", "missing"}, code: ExitError, noRequest: true,
			stderr: `Error from server (NotFound): leases.coordination.k8s.io "missing" not found` + "\n"},
		{name: "the holder's pod is gone", phase: corev1.PodRunning, args: []string{"release", "cache-warmer"}, code: ExitError, noRequest: true,
			stderr: `Error from server (NotFound): the holder's pod: pods "pod-c" not found` + "\n"},
		{name: "the holder's pod is not running", phase: corev1.PodPending, args: []string{"release", "nightly-run"}, code: ExitError, noRequest: true,
			stderr: "error: pod team/pod-a is Pending, not Running: its sidecar cannot be reached\n"},
		{name: "the sidecar refuses", phase: corev1.PodRunning, args: []string{"release", "nightly-run"}, code: ExitError,
			status: http.StatusServiceUnavailable, body: `{"error":"the election is not running"}`,
			stderr: "error: POST /release to pod team/pod-a: POST /release: 503 Service Unavailable: the election is not running\n"},
		{name: "--for too long", args: []string{"release", "nightly-run", "--for=25h"}, code: ExitUsage, noAPI: true, noRequest: true,
			stderr: "error: --for 25h0m0s: must be between 0 and 24h0m0s (see 'kubectl elector release --help')\n"},
		{name: "--for negative", args: []string{"release", "nightly-run", "--for=-1s"}, code: ExitUsage, noAPI: true, noRequest: true,
			stderr: "error: --for -1s: must be between 0 and 24h0m0s (see 'kubectl elector release --help')\n"},
		{name: "--port out of range", args: []string{"release", "nightly-run", "--port=0"}, code: ExitUsage, noAPI: true, noRequest: true,
			stderr: "error: --port 0: must be 1-65535 (see 'kubectl elector release --help')\n"},
		{name: "no Lease", args: []string{"release"}, code: ExitUsage, noAPI: true, noRequest: true,
			stderr: "error: release needs exactly one LEASE, got 0 arguments (see 'kubectl elector release --help')\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(releaseObjects(tc.phase)...)
			s := &sidecarStub{status: tc.status, body: tc.body}
			r := runRelease(t, client, s, tc.args...)
			if r.code != tc.code || r.stderr != tc.stderr || r.stdout != "" {
				t.Errorf("exit %d, stderr %q, stdout %q\nwant exit %d, stderr %q, no stdout", r.code, r.stderr, r.stdout, tc.code, tc.stderr)
			}
			if n := len(client.Actions()); tc.noAPI && n != 0 {
				t.Errorf("%d API calls for a usage error, want none: %v", n, client.Actions())
			}
			if tc.noRequest && (len(s.requests) != 0 || len(s.forwards) != 0) {
				t.Errorf("forwards %v, requests %v; want none", s.forwards, s.requests)
			}
			if len(s.forwards) != s.stopped {
				t.Errorf("%d forwards, %d stopped: a tunnel was left open", len(s.forwards), s.stopped)
			}
		})
	}
}

func TestCompletionListsTheNamespacesLeases(t *testing.T) {
	client := fake.NewClientset(objects()...)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"__complete", "status", ""}, "cache-warmer\nfree\nkube-thing\nnightly-run\n:4\n"},
		{[]string{"__complete", "watch", "n"}, "nightly-run\n:4\n"},
		{[]string{"__complete", "release", "-n", "other", ""}, "billing\n:4\n"},
		{[]string{"__complete", "watch", "nightly-run", ""}, ":4\n"}, // one LEASE only
	} {
		r := runPlugin(t, context.Background(), client, tc.args...)
		if r.code != ExitOK || r.stdout != tc.want {
			t.Errorf("%v: exit %d, stdout %q, want %q", tc.args, r.code, r.stdout, tc.want)
		}
	}
	forbidden := fake.NewClientset()
	forbidden.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, context.DeadlineExceeded
	})
	if r := runPlugin(t, context.Background(), forbidden, "__complete", "status", ""); r.code != ExitOK || r.stdout != ":4\n" {
		t.Errorf("completion when listing fails: exit %d, stdout %q, want nothing completed", r.code, r.stdout)
	}
	if r := runPlugin(t, context.Background(), client, "completion", "bash"); r.code != ExitOK || !strings.Contains(r.stdout, "__start_kubectl-elector") {
		t.Errorf("completion bash: exit %d, stdout %.200q, want cobra's bash script", r.code, r.stdout)
	}
}
