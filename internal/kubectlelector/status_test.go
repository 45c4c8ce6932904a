package kubectlelector

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
)

// now is the fixed clock of every test.
var now = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func lease(ns, name, holder string, transitions int32, renewedAgo time.Duration, durationSeconds int32) *coordinationv1.Lease {
	rt := metav1.NewMicroTime(now.Add(-renewedAgo))
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name),
			// Written by elector-sidecar (status -A lists only these).
			Annotations: map[string]string{election.IncarnationAnnotation: "0123456789abcdef"},
			Labels:      map[string]string{"app.kubernetes.io/instance": name}},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       &holder,
			LeaseTransitions:     &transitions,
			RenewTime:            &rt,
			LeaseDurationSeconds: &durationSeconds,
		},
	}
}

func event(ns, name, kind, involved, host, eventType, message string, ago time.Duration) *corev1.Event {
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: ns, Name: name},
		InvolvedObject: corev1.ObjectReference{Kind: kind, Namespace: ns, Name: involved, APIVersion: "coordination.k8s.io/v1"},
		Reason:         "LeaderElection",
		Message:        message,
		Type:           eventType,
		Source:         corev1.EventSource{Component: "elector-sidecar", Host: host},
		FirstTimestamp: metav1.NewTime(now.Add(-ago)),
		LastTimestamp:  metav1.NewTime(now.Add(-ago)),
		Count:          1,
	}
}

// objects is the cluster of the status tests.
func objects() []runtime.Object {
	bare := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "kube-thing"}}
	return []runtime.Object{
		lease("team", "nightly-run", "pod-a", 7, 2*time.Second, 15),
		lease("team", "cache-warmer", "pod-c", 3, 40*time.Second, 15),
		lease("team", "free", "", 8, 5*time.Minute+3*time.Second, 15),
		bare,
		lease("other", "billing", "pod-x", 1, 1500*time.Millisecond, 10),
		// Listed out of order: the output is oldest first.
		event("team", "e3", "Lease", "nightly-run", "pod-a", "Normal", "pod-a became leader with fencing token 7", 30*time.Second),
		event("team", "e1", "Lease", "nightly-run", "pod-b", "Normal", "pod-b became leader with fencing token 6", 10*time.Minute),
		event("team", "e2", "Lease", "nightly-run", "pod-b", "Normal", "pod-b released leadership (token 6): terminating", 32*time.Second),
		// Not on this Lease.
		event("team", "x1", "Lease", "cache-warmer", "pod-c", "Normal", "pod-c became leader with fencing token 3", time.Minute),
		event("team", "x2", "Pod", "nightly-run", "node-1", "Normal", "Started container", time.Second),
	}
}

// kubeconfig writes a kubeconfig whose context's namespace is "team".
func kubeconfig(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	const cfg = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1"}
users:
- name: u
  user: {token: "t"}
contexts:
- name: ctx
  context: {cluster: c, user: u, namespace: team}
current-context: ctx
`
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

type result struct {
	stdout, stderr string
	code           int
}

// runPlugin runs the plugin on client with the fixed clock and a kubeconfig
// whose namespace is "team".
func runPlugin(t *testing.T, ctx context.Context, client kubernetes.Interface, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := runTo(t, ctx, client, clocktesting.NewFakePassiveClock(now), &stdout, &stderr, args...)
	return result{stdout: stdout.String(), stderr: stderr.String(), code: code}
}

func runTo(t *testing.T, ctx context.Context, client kubernetes.Interface, clk *clocktesting.FakePassiveClock, stdout, stderr interface {
	Write([]byte) (int, error)
}, args ...string) int {
	deps := Deps{
		NewClient: func(*genericclioptions.ConfigFlags) (kubernetes.Interface, error) { return client, nil },
		Clock:     clk,
	}
	args = append([]string{"--kubeconfig", kubeconfig(t)}, args...)
	return Run(ctx, args, genericiooptions.IOStreams{In: strings.NewReader(""), Out: stdout, ErrOut: stderr}, deps)
}

func TestStatusPrintsHolderTokenAndExpiry(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{{
		name: "a namespace: every Lease, by name; expired and free Leases; a Lease without spec",
		args: []string{"status", "-n", "team"},
		want: `LEASE          HOLDER   TOKEN   RENEWED    DURATION   EXPIRES IN
cache-warmer   pod-c    3       40s ago    15s        expired
free           <none>   8       5m3s ago   15s        -
kube-thing     <none>   0       -          -          -
nightly-run    pod-a    7       2s ago     15s        13s
`,
	}, {
		name: "the kubeconfig context's namespace without -n",
		args: []string{"status"},
		want: `LEASE          HOLDER   TOKEN   RENEWED    DURATION   EXPIRES IN
cache-warmer   pod-c    3       40s ago    15s        expired
free           <none>   8       5m3s ago   15s        -
kube-thing     <none>   0       -          -          -
nightly-run    pod-a    7       2s ago     15s        13s
`,
	}, {
		name: "all namespaces: NAMESPACE first, only the Leases elector-sidecar wrote",
		args: []string{"status", "-A"},
		want: `NAMESPACE   LEASE          HOLDER   TOKEN   RENEWED    DURATION   EXPIRES IN
other       billing        pod-x    1       1s ago     10s        8s
team        cache-warmer   pod-c    3       40s ago    15s        expired
team        free           <none>   8       5m3s ago   15s        -
team        nightly-run    pod-a    7       2s ago     15s        13s
`,
	}, {
		name: "all namespaces, every Lease with --all-leases",
		args: []string{"status", "-A", "--all-leases"},
		want: `NAMESPACE   LEASE          HOLDER   TOKEN   RENEWED    DURATION   EXPIRES IN
other       billing        pod-x    1       1s ago     10s        8s
team        cache-warmer   pod-c    3       40s ago    15s        expired
team        free           <none>   8       5m3s ago   15s        -
team        kube-thing     <none>   0       -          -          -
team        nightly-run    pod-a    7       2s ago     15s        13s
`,
	}, {
		name: "a label selector, all namespaces",
		args: []string{"status", "-A", "-l", "app.kubernetes.io/instance in (billing,free)"},
		want: `NAMESPACE   LEASE     HOLDER   TOKEN   RENEWED    DURATION   EXPIRES IN
other       billing   pod-x    1       1s ago     10s        8s
team        free      <none>   8       5m3s ago   15s        -
`,
	}, {
		name: "a label selector that matches nothing",
		args: []string{"status", "--selector=app.kubernetes.io/instance=nope"},
		want: "No leases found in team namespace.\n",
	}, {
		name: "wide: the renew time and the UID (!= also selects Leases without the label)",
		args: []string{"status", "-n", "team", "-o", "wide", "-l", "app.kubernetes.io/instance!=cache-warmer"},
		want: `LEASE         HOLDER   TOKEN   RENEWED    DURATION   EXPIRES IN   RENEW TIME             UID
free          <none>   8       5m3s ago   15s        -            2025-06-01T11:54:57Z   uid-free
kube-thing    <none>   0       -          -          -            -                      <none>
nightly-run   pod-a    7       2s ago     15s        13s          2025-06-01T11:59:58Z   uid-nightly-run
`,
	}, {
		name: "wide for one Lease keeps its Events",
		args: []string{"status", "nightly-run", "-o", "wide", "--events=1"},
		want: `LEASE         HOLDER   TOKEN   RENEWED   DURATION   EXPIRES IN   RENEW TIME             UID
nightly-run   pod-a    7       2s ago    15s        13s          2025-06-01T11:59:58Z   uid-nightly-run

Events:
  TIME      TYPE     REASON           FROM    MESSAGE
  30s ago   Normal   LeaderElection   pod-a   pod-a became leader with fencing token 7
`,
	}, {
		name: "names, as kubectl get -o name",
		args: []string{"status", "-A", "-o", "name"},
		want: `lease.coordination.k8s.io/billing
lease.coordination.k8s.io/cache-warmer
lease.coordination.k8s.io/free
lease.coordination.k8s.io/nightly-run
`,
	}, {
		name: "jsonpath over one Lease, its Events included",
		args: []string{"status", "nightly-run", "-o", "jsonpath={.holder} {.token} {.expiresInMs} {.events[-1:].message}", "--events=2"},
		want: "pod-a 7 13000 pod-a became leader with fencing token 7",
	}, {
		name: "jsonpath over a list",
		args: []string{"status", "-A", `-o=jsonpath={range .items[*]}{.namespace}/{.name}={.holder}{"\n"}{end}`},
		want: "other/billing=pod-x\nteam/cache-warmer=pod-c\nteam/free=\nteam/nightly-run=pod-a\n",
	}, {
		name: "jsonpath with a missing key prints nothing for it, as kubectl",
		args: []string{"status", "free", "-o", "jsonpath={.holder}|{.expiresInMs}|{.token}", "--events=0"},
		want: "||8",
	}, {
		name: "one Lease: its Events on the Lease only, oldest first",
		args: []string{"status", "nightly-run", "-n", "team"},
		want: `LEASE         HOLDER   TOKEN   RENEWED   DURATION   EXPIRES IN
nightly-run   pod-a    7       2s ago    15s        13s

Events:
  TIME      TYPE     REASON           FROM    MESSAGE
  10m ago   Normal   LeaderElection   pod-b   pod-b became leader with fencing token 6
  32s ago   Normal   LeaderElection   pod-b   pod-b released leadership (token 6): terminating
  30s ago   Normal   LeaderElection   pod-a   pod-a became leader with fencing token 7
`,
	}, {
		name: "--events keeps the newest",
		args: []string{"status", "nightly-run", "-n", "team", "--events", "1"},
		want: `LEASE         HOLDER   TOKEN   RENEWED   DURATION   EXPIRES IN
nightly-run   pod-a    7       2s ago    15s        13s

Events:
  TIME      TYPE     REASON           FROM    MESSAGE
  30s ago   Normal   LeaderElection   pod-a   pod-a became leader with fencing token 7
`,
	}, {
		name: "--events 0 leaves them out",
		args: []string{"status", "nightly-run", "-n", "team", "--events=0"},
		want: `LEASE         HOLDER   TOKEN   RENEWED   DURATION   EXPIRES IN
nightly-run   pod-a    7       2s ago    15s        13s
`,
	}, {
		name: "one Lease without Events",
		args: []string{"status", "free", "-n", "team"},
		want: `LEASE   HOLDER   TOKEN   RENEWED    DURATION   EXPIRES IN
free    <none>   8       5m3s ago   15s        -

Events: <none>
`,
	}, {
		name: "an empty namespace",
		args: []string{"status", "-n", "empty"},
		want: "No leases found in empty namespace.\n",
	}, {
		name: "a structured object for one Lease",
		args: []string{"status", "nightly-run", "-n", "team", "-o", "json", "--events", "1"},
		want: `{
    "kind": "LeaseStatus",
    "apiVersion": "elector-sidecar.io/v1alpha1",
    "namespace": "team",
    "name": "nightly-run",
    "uid": "uid-nightly-run",
    "holder": "pod-a",
    "token": 7,
    "renewTime": "2025-06-01T11:59:58.000000Z",
    "renewedAgoMs": 2000,
    "leaseDurationSeconds": 15,
    "expiresInMs": 13000,
    "expired": false,
    "observedAt": "2025-06-01T12:00:00.000000Z",
    "events": [
        {
            "time": "2025-06-01T11:59:30Z",
            "type": "Normal",
            "reason": "LeaderElection",
            "source": "pod-a",
            "message": "pod-a became leader with fencing token 7",
            "count": 1
        }
    ]
}
`,
	}, {
		name: "a structured list, as YAML",
		args: []string{"status", "-n", "other", "-o", "yaml"},
		want: `apiVersion: elector-sidecar.io/v1alpha1
items:
- apiVersion: elector-sidecar.io/v1alpha1
  expired: false
  expiresInMs: 8500
  holder: pod-x
  kind: LeaseStatus
  leaseDurationSeconds: 10
  name: billing
  namespace: other
  observedAt: "2025-06-01T12:00:00.000000Z"
  renewTime: "2025-06-01T11:59:58.500000Z"
  renewedAgoMs: 1500
  token: 1
  uid: uid-billing
kind: LeaseStatusList
`,
	}, {
		name: "an empty structured list",
		args: []string{"status", "-n", "empty", "-o", "json"},
		want: `{
    "kind": "LeaseStatusList",
    "apiVersion": "elector-sidecar.io/v1alpha1",
    "items": []
}
`,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := runPlugin(t, context.Background(), fake.NewClientset(objects()...), tc.args...)
			if r.code != ExitOK || r.stderr != "" {
				t.Fatalf("exit %d, stderr %q; want 0 and nothing", r.code, r.stderr)
			}
			if r.stdout != tc.want {
				t.Errorf("output:\n%s\nwant:\n%s", r.stdout, tc.want)
			}
		})
	}
}

func TestStatusExpiresAtTheEndOfTheLeaseDuration(t *testing.T) {
	tests := []struct {
		renewedAgo time.Duration
		expires    string
		expired    bool
	}{
		{0, "15s", false},
		{14 * time.Second, "1s", false},
		{14*time.Second + 500*time.Millisecond, "0s", false},
		{15 * time.Second, "expired", true},
		{-3 * time.Second, "18s", false}, // renewTime ahead of this clock: RENEWED says 0s
		{time.Hour, "expired", true},
	}
	for _, tc := range tests {
		st := Status(lease("ns", "l", "pod-a", 2, tc.renewedAgo, 15), now)
		if got := expiresIn(st); got != tc.expires || st.Expired != tc.expired {
			t.Errorf("renewed %v ago: EXPIRES IN %q expired=%v, want %q %v", tc.renewedAgo, got, st.Expired, tc.expires, tc.expired)
		}
		if tc.renewedAgo < 0 && renewed(st) != "0s ago" {
			t.Errorf("renewed %v ago: RENEWED %q, want 0s ago", tc.renewedAgo, renewed(st))
		}
	}
}

func TestStatusErrorsLikeKubectl(t *testing.T) {
	forbidden := func() kubernetes.Interface {
		c := fake.NewClientset(objects()...)
		c.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(coordinationv1.Resource("leases"), "", errors.New(`User "u" cannot list resource "leases"`))
		})
		return c
	}
	unreachable := func() kubernetes.Interface {
		c := fake.NewClientset()
		c.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
		})
		return c
	}
	tests := []struct {
		name   string
		client func() kubernetes.Interface
		args   []string
		code   int
		stderr string
		noAPI  bool // usage errors: nothing is sent to the API server
	}{{
		name:   "a missing Lease",
		args:   []string{"status", "missing", "-n", "team"},
		code:   ExitError,
		stderr: `Error from server (NotFound): leases.coordination.k8s.io "missing" not found` + "\n",
	}, {
		name:   "forbidden",
		client: forbidden,
		args:   []string{"status", "-n", "team"},
		code:   ExitError,
		stderr: `Error from server (Forbidden): leases.coordination.k8s.io is forbidden: User "u" cannot list resource "leases"` + "\n",
	}, {
		name:   "not an API error",
		client: unreachable,
		args:   []string{"status", "x", "-n", "team"},
		code:   ExitError,
		stderr: "error: dial tcp 127.0.0.1:1: connect: connection refused\n",
	}, {
		name:   "an unknown flag",
		args:   []string{"status", "--bogus"},
		code:   ExitUsage,
		stderr: "error: unknown flag: --bogus (see 'kubectl elector status --help')\n",
		noAPI:  true,
	}, {
		name:   "an unknown command",
		args:   []string{"stauts"},
		code:   ExitUsage,
		stderr: `error: unknown command "stauts" for "kubectl elector" (see 'kubectl elector --help')` + "\n",
		noAPI:  true,
	}, {
		name:   "two Leases",
		args:   []string{"status", "a", "b"},
		code:   ExitUsage,
		stderr: "error: at most one LEASE, got 2 arguments (see 'kubectl elector status --help')\n",
		noAPI:  true,
	}, {
		name:   "an unknown output format",
		args:   []string{"status", "-o", "table"},
		code:   ExitUsage,
		stderr: `error: --output "table": must be one of json, yaml, wide, name, jsonpath=TEMPLATE (see 'kubectl elector status --help')` + "\n",
		noAPI:  true,
	}, {
		name:   "a jsonpath that does not parse",
		args:   []string{"status", "-o", "jsonpath={.items[*]"},
		code:   ExitUsage,
		stderr: `error: --output "jsonpath={.items[*]": unclosed action (see 'kubectl elector status --help')` + "\n",
		noAPI:  true,
	}, {
		name:   "an empty jsonpath",
		args:   []string{"status", "-o", "jsonpath="},
		code:   ExitUsage,
		stderr: `error: --output "jsonpath=": jsonpath= needs a template, e.g. jsonpath='{.holder}' (see 'kubectl elector status --help')` + "\n",
		noAPI:  true,
	}, {
		name:   "a selector that does not parse",
		args:   []string{"status", "-l", "app in (a"},
		code:   ExitUsage,
		stderr: `error: --selector "app in (a": unable to parse requirement: found '', expected: ',' or ')' (see 'kubectl elector status --help')` + "\n",
		noAPI:  true,
	}, {
		name:   "a name with a selector",
		args:   []string{"status", "x", "-l", "a=b"},
		code:   ExitUsage,
		stderr: "error: a LEASE name cannot be combined with --selector (see 'kubectl elector status --help')\n",
		noAPI:  true,
	}, {
		name:   "--all-leases without -A",
		args:   []string{"status", "--all-leases"},
		code:   ExitUsage,
		stderr: "error: --all-leases only widens --all-namespaces (-A); a namespace's list has every Lease already (see 'kubectl elector status --help')\n",
		noAPI:  true,
	}, {
		name:   "a negative event count",
		args:   []string{"status", "x", "--events=-1"},
		code:   ExitUsage,
		stderr: "error: --events -1: must be 0 or more (see 'kubectl elector status --help')\n",
		noAPI:  true,
	}, {
		name:   "a name with -A",
		args:   []string{"status", "x", "-A"},
		code:   ExitUsage,
		stderr: "error: a LEASE name cannot be combined with --all-namespaces (see 'kubectl elector status --help')\n",
		noAPI:  true,
	}, {
		name:   "an event count that is not a number",
		args:   []string{"status", "x", "--events", "many"},
		code:   ExitUsage,
		stderr: `error: invalid argument "many" for "--events" flag: strconv.ParseInt: parsing "many": invalid syntax (see 'kubectl elector status --help')` + "\n",
		noAPI:  true,
	}, {
		name:   "watch without a Lease",
		args:   []string{"watch"},
		code:   ExitUsage,
		stderr: "error: watch needs exactly one LEASE, got 0 arguments (see 'kubectl elector watch --help')\n",
		noAPI:  true,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var client kubernetes.Interface = fake.NewClientset(objects()...)
			if tc.client != nil {
				client = tc.client()
			}
			r := runPlugin(t, context.Background(), client, tc.args...)
			if r.code != tc.code || r.stderr != tc.stderr || r.stdout != "" {
				t.Errorf("exit %d, stderr %q, stdout %q\nwant exit %d, stderr %q, no stdout", r.code, r.stderr, r.stdout, tc.code, tc.stderr)
			}
			if n := len(client.(interface{ Actions() []k8stesting.Action }).Actions()); tc.noAPI && n != 0 {
				t.Errorf("%d API calls for a usage error, want none", n)
			}
		})
	}
}
