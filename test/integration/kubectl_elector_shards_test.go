package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/elector-sidecar/elector-sidecar/internal/kubectlelector"
	"github.com/elector-sidecar/elector-sidecar/pkg/shards"
	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// TestKubectlElectorStatusGroupsAShardSetOnARealAPIServer: a shard set's
// Leases, created by hand on a real API server as pkg/shards writes them (a
// session Lease per member, a Lease per shard naming its holder's session
// term), are shown by `kubectl elector status` (through the real kubectl) as
// one set: pod-a live with shards 0 and 1, pod-b's session expired with
// shard 2, shard 3 free; the namespace's other Lease keeps its own row;
// `status SET` shows the set and the Event on one of its Leases, -o json the
// Leases' real UIDs and tokens, -o name every Lease of the set, and a shard
// Lease asked for by name is an ordinary Lease.
func TestKubectlElectorStatusGroupsAShardSetOnARealAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	plugin := pluginBinary(t)
	ns, err := env.cp.CreateNamespace(ctx, "kshards")
	if err != nil {
		t.Fatal(err)
	}
	leases := env.cp.Client.CoordinationV1().Leases(ns)
	create := func(l *coordinationv1.Lease) *coordinationv1.Lease {
		t.Helper()
		got, err := leases.Create(ctx, l, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create Lease %s: %v", l.Name, err)
		}
		return got
	}
	spec := func(holder string, transitions int32, renewedAgo time.Duration) coordinationv1.LeaseSpec {
		rt := metav1.NewMicroTime(time.Now().Add(-renewedAgo))
		s := coordinationv1.LeaseSpec{LeaseTransitions: &transitions, RenewTime: &rt, LeaseDurationSeconds: ptrTo(int32(15))}
		if holder != "" {
			s.HolderIdentity = &holder
		}
		return s
	}
	member := func(id string, term int32, renewedAgo time.Duration) *coordinationv1.Lease {
		return create(&coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: shards.MemberLeaseName("orders", id),
				Labels: map[string]string{shards.SetLabel: "orders", shards.RoleLabel: shards.RoleMember}},
			Spec: spec(id, term, renewedAgo),
		})
	}
	shard := func(i int, holder string, token int32, session *coordinationv1.Lease) *coordinationv1.Lease {
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: shards.ShardLeaseName("orders", i),
				Labels: map[string]string{shards.SetLabel: "orders", shards.RoleLabel: shards.RoleShard, shards.IndexLabel: fmt.Sprint(i)}},
			Spec: spec(holder, token, time.Minute),
		}
		if session != nil {
			b, _ := json.Marshal(shards.SessionRef{Lease: session.Name, UID: string(session.UID), Term: int64(*session.Spec.LeaseTransitions)})
			l.Annotations = map[string]string{shards.SessionAnnotation: string(b)}
		}
		return create(l)
	}
	a := member("pod-a", 2, 0)
	b := member("pod-b", 1, time.Minute) // 60 s ago with 15 s: expired
	s0, s1, s2, s3 := shard(0, "pod-a", 4, a), shard(1, "pod-a", 6, a), shard(2, "pod-b", 3, b), shard(3, "", 5, nil)
	create(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "nightly-run"}, Spec: spec("pod-x", 7, 0)})
	if _, err := env.cp.Client.CoreV1().Events(ns).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "orders-1.move"},
		InvolvedObject: corev1.ObjectReference{Kind: "Lease", Namespace: ns, Name: s1.Name, UID: s1.UID, APIVersion: "coordination.k8s.io/v1"},
		Reason:         "ShardMoved", Message: "shard 1 moved to pod-a (rebalance), token 6", Type: corev1.EventTypeNormal,
		Source: corev1.EventSource{Component: "elector-sidecar", Host: "pod-a"}, FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Through the real kubectl, which finds the plugin on PATH.
	shellEnv := []string{
		"KUBECONFIG=" + env.cp.Kubeconfig,
		"PATH=" + filepath.Dir(plugin) + string(os.PathListSeparator) + env.cp.AssetsDir + string(os.PathListSeparator) + os.Getenv("PATH"),
	}
	run := func(args ...string) string {
		t.Helper()
		r := runCommand(t, ctx, shellEnv, append([]string{filepath.Join(env.cp.AssetsDir, "kubectl"), "elector"}, args...)...)
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("kubectl elector %v: %v", args, r)
		}
		return r.stdout
	}
	fields := func(lines []string) [][]string {
		var out [][]string
		for _, l := range lines {
			out = append(out, strings.Fields(l))
		}
		return out
	}

	lines := nonEmptyLines(run("status", "-n", ns))
	if len(lines) != 6 || !strings.HasPrefix(lines[0], "LEASE ") || !strings.HasPrefix(lines[1], "nightly-run ") || !strings.HasPrefix(lines[2], "SET ") {
		t.Fatalf("status -n NS printed %q; want the Lease table with nightly-run alone, then the SET table", lines)
	}
	want := [][]string{
		{"orders", "pod-a", "live"}, {"orders", "pod-b", "expired"}, {"orders", "<none>", "free"},
	}
	wantShards := [][2]string{
		{"0,1", fmt.Sprintf("%d,%d", *s0.Spec.LeaseTransitions, *s1.Spec.LeaseTransitions)},
		{"2", fmt.Sprint(*s2.Spec.LeaseTransitions)},
		{"3", fmt.Sprint(*s3.Spec.LeaseTransitions)},
	}
	for i, f := range fields(lines[3:]) {
		if len(f) < 5 || !slices.Equal(f[:3], want[i]) || f[len(f)-2] != wantShards[i][0] || f[len(f)-1] != wantShards[i][1] {
			t.Errorf("set row %d: %q, want %v ... SHARDS %s TOKENS %s", i, lines[3+i], want[i], wantShards[i][0], wantShards[i][1])
		}
	}

	// One set by its name: the same rows (RENEWED and EXPIRES IN aside, the
	// clock moved on), and the Event on its shard Lease.
	stable := func(lines []string) []string {
		var out []string
		for _, f := range fields(lines) {
			if len(f) >= 5 {
				out = append(out, strings.Join(append(f[:3:3], f[len(f)-2:]...), " "))
			}
		}
		return out
	}
	one := run("status", "orders", "-n", ns)
	if oneLines := nonEmptyLines(one); !strings.Contains(one, "\nEvents:\n") || !strings.Contains(one, "shard 1 moved to pod-a (rebalance), token 6") ||
		len(oneLines) < 4 || !slices.Equal(stable(oneLines[1:4]), stable(lines[3:])) {
		t.Errorf("status orders printed:\n%s\nwant the set's rows %q and its Event", one, lines[2:])
	}

	var set kubectlelector.ShardSetStatus
	if err := json.Unmarshal([]byte(run("status", "orders", "-n", ns, "-o", "json")), &set); err != nil {
		t.Fatal(err)
	}
	if set.Kind != "ShardSetStatus" || set.Name != "orders" || set.Shards != 4 || set.Held != 2 || set.Live != 1 || len(set.Members) != 3 {
		t.Fatalf("status orders -o json: %+v", set)
	}
	if m := set.Members[0]; m.Identity != "pod-a" || m.UID != string(a.UID) || len(m.Shards) != 2 ||
		m.Shards[0] != (kubectlelector.HeldShard{Index: 0, Lease: s0.Name, UID: string(s0.UID), Token: int64(*s0.Spec.LeaseTransitions), Valid: true}) ||
		m.Shards[1] != (kubectlelector.HeldShard{Index: 1, Lease: s1.Name, UID: string(s1.UID), Token: int64(*s1.Spec.LeaseTransitions), Valid: true}) {
		t.Errorf("pod-a: %+v, want shards 0 and 1 with the Leases' UIDs and tokens", m)
	}
	if m := set.Members[1]; m.Identity != "pod-b" || m.State != kubectlelector.MemberExpired || len(m.Shards) != 1 || m.Shards[0].Valid {
		t.Errorf("pod-b: %+v, want expired with shard 2 not valid", m)
	}

	names := nonEmptyLines(run("status", "orders", "-n", ns, "-o", "name"))
	var wantNames []string
	for _, l := range []*coordinationv1.Lease{s0, s1, s2, s3, a, b} {
		wantNames = append(wantNames, "lease.coordination.k8s.io/"+l.Name)
	}
	slices.Sort(wantNames)
	if !slices.Equal(names, wantNames) {
		t.Errorf("status orders -o name: %q, want %q", names, wantNames)
	}
	if got := run("status", s2.Name, "-n", ns, "-o", "jsonpath={.holder} {.token}"); got != fmt.Sprintf("pod-b %d", *s2.Spec.LeaseTransitions) {
		t.Errorf("status %s -o jsonpath printed %q: a shard Lease by name is one Lease", s2.Name, got)
	}
}

// TestKubectlElectorStatusShowsARealShardSet: three real sidecars with
// --shards=5 on the real API server; `kubectl elector status SET -o json`
// shows the three live members holding every shard in fair shares (1 or 2
// each) with valid tokens, each token the one on the shard's Lease; after a
// SIGKILL of one member, its shards are held again, by the other two live
// members, with higher tokens.
func TestKubectlElectorStatusShowsARealShardSet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	plugin := pluginBinary(t)
	ns, err := env.cp.CreateNamespace(ctx, "kshardset")
	if err != nil {
		t.Fatal(err)
	}
	logDir := filepath.Join(env.logDir, t.Name())
	members := map[string]*framework.Candidate{}
	for _, id := range []string{"pod-a", "pod-b", "pod-c"} {
		c, err := framework.StartCandidate(ctx, framework.CandidateSpec{Binary: env.sidecarBin, Identity: id, LeaseName: "orders",
			Namespace: ns, Kubeconfig: env.cp.Kubeconfig, Timings: testTimings, LogDir: logDir, ExtraArgs: []string{"--shards=5"}})
		if err != nil {
			t.Fatal(err)
		}
		members[id] = c
		t.Cleanup(func() { c.Stop(3 * time.Second) })
	}
	status := func(ctx context.Context) (kubectlelector.ShardSetStatus, error) {
		var set kubectlelector.ShardSetStatus
		r := runCommand(t, ctx, nil, plugin, "--kubeconfig", env.cp.Kubeconfig, "status", "orders", "-n", ns, "-o", "json")
		if r.code != 0 || r.stderr != "" {
			return set, fmt.Errorf("%v", r)
		}
		return set, json.Unmarshal([]byte(r.stdout), &set)
	}
	// held checks that the live members are want, hold every shard with a
	// valid token in fair shares, and that each token is its Lease's.
	held := func(ctx context.Context, want ...string) (map[int]int64, error) {
		set, err := status(ctx)
		if err != nil {
			return nil, err
		}
		tokens := map[int]int64{}
		var live []string
		lo, hi := 5/len(want), (5+len(want)-1)/len(want)
		for _, m := range set.Members {
			if m.State != kubectlelector.MemberLive {
				if len(m.Shards) > 0 {
					return nil, fmt.Errorf("%s (%s) still holds %d shards", m.Identity, m.State, len(m.Shards))
				}
				continue
			}
			live = append(live, m.Identity)
			if n := len(m.Shards); n < lo || n > hi {
				return nil, fmt.Errorf("%s holds %d shards, not a fair share (%d or %d)", m.Identity, n, lo, hi)
			}
			for _, h := range m.Shards {
				if !h.Valid {
					return nil, fmt.Errorf("%s's shard %d (token %d) is not valid", m.Identity, h.Index, h.Token)
				}
				tokens[h.Index] = h.Token
			}
		}
		if !slices.Equal(live, want) || set.Shards != 5 || set.Held != 5 || len(tokens) != 5 {
			return nil, fmt.Errorf("live members %v (want %v), %d shards, %d held, tokens %v", live, want, set.Shards, set.Held, tokens)
		}
		for i, tok := range tokens {
			l, err := env.cp.GetLease(ctx, ns, shards.ShardLeaseName("orders", i))
			if err != nil || l.Spec.LeaseTransitions == nil || int64(*l.Spec.LeaseTransitions) != tok {
				return nil, fmt.Errorf("shard %d: status says token %d, its Lease %v (%v)", i, tok, l.Spec.LeaseTransitions, err)
			}
		}
		return tokens, nil
	}
	var before map[int]int64
	if err := framework.Eventually(ctx, framework.PollInterval, 2*startupTimeout, "three live members holding every shard", func(ctx context.Context) error {
		var err error
		before, err = held(ctx, "pod-a", "pod-b", "pod-c")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	set, err := status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var killed []int
	for _, m := range set.Members {
		if m.Identity == "pod-b" {
			for _, h := range m.Shards {
				killed = append(killed, h.Index)
			}
		}
	}
	if err := members["pod-b"].Kill(); err != nil {
		t.Fatal(err)
	}
	if err := framework.Eventually(ctx, framework.PollInterval, 2*startupTimeout, "pod-a and pod-c holding every shard", func(ctx context.Context) error {
		after, err := held(ctx, "pod-a", "pod-c")
		if err != nil {
			return err
		}
		for _, i := range killed {
			if after[i] <= before[i] {
				return fmt.Errorf("pod-b's shard %d has token %d, not above %d", i, after[i], before[i])
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("pod-b held shards %v; after its SIGKILL the other two hold them with higher tokens", killed)
}
