package kubectlelector

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/elector-sidecar/elector-sidecar/pkg/shards"
)

// memberLease is a member's session Lease of set "orders" in namespace team.
func memberLease(identity string, term int32, renewedAgo time.Duration) *coordinationv1.Lease {
	l := lease("team", shards.MemberLeaseName("orders", identity), identity, term, renewedAgo, 15)
	l.Labels = map[string]string{shards.SetLabel: "orders", shards.RoleLabel: shards.RoleMember}
	return l
}

// shardLease is shard i of set "orders", held by holder under the session
// term of member sessionOf (none if "").
func shardLease(i int, holder string, token int32, sessionOf string, term int64) *coordinationv1.Lease {
	l := lease("team", shards.ShardLeaseName("orders", i), holder, token, 5*time.Second, 15)
	l.Labels = map[string]string{shards.SetLabel: "orders", shards.RoleLabel: shards.RoleShard, shards.IndexLabel: fmt.Sprint(i)}
	if sessionOf != "" {
		name := shards.MemberLeaseName("orders", sessionOf)
		b, _ := json.Marshal(shards.SessionRef{Lease: name, UID: "uid-" + name, Term: term})
		l.Annotations[shards.SessionAnnotation] = string(b)
	}
	return l
}

// setObjects is objects() plus a shard set "orders" of 6 shards in team:
// pod-a and pod-b live, pod-c's session expired, pod-d left, pod-e's session
// ended by pod-a; shard 2 was given to pod-a in an older term, shard 4 is free,
// shard 5 names a holder with no session Lease.
func setObjects() []runtime.Object {
	ended := memberLease("pod-e", 4, 20*time.Second)
	ended.Annotations[shards.EndedAnnotation] = `{"term":4,"by":"pod-a"}`
	left := memberLease("pod-d", 2, 5*time.Minute)
	left.Spec.HolderIdentity = nil
	return append(objects(),
		memberLease("pod-a", 1, time.Second),
		memberLease("pod-b", 2, 2*time.Second),
		memberLease("pod-c", 1, 40*time.Second),
		left, ended,
		shardLease(0, "pod-a", 3, "pod-a", 1),
		shardLease(1, "pod-b", 5, "pod-b", 2),
		shardLease(2, "pod-a", 2, "pod-a", 0),
		shardLease(3, "pod-c", 7, "pod-c", 1),
		shardLease(4, "", 4, "", 0),
		shardLease(5, "pod-z", 1, "", 0),
		shardLease(10, "pod-b", 9, "pod-b", 2),
		event("team", "s1", "Lease", "orders-1", "pod-b", "Normal", "shard 1 moved from pod-a to pod-b (rebalance), token 5", 20*time.Second),
		event("team", "s2", "Lease", "orders-member-pod-e", "pod-a", "Normal", "ended the session of pod-e", 15*time.Second),
		event("team", "s3", "Lease", "orders-3", "pod-c", "Normal", "shard 3 taken by pod-c (expired), token 7", time.Minute),
	)
}

func TestStatusGroupsAShardSetByMember(t *testing.T) {
	setTable := `SET      MEMBER   STATE        RENEWED   EXPIRES IN   SHARDS   TOKENS
orders   pod-a    live         1s ago    14s          0,2      3,2(old term)
orders   pod-b    live         2s ago    13s          1,10     5,9
orders   pod-c    expired      40s ago   expired      3        7
orders   pod-d    left         5m ago    -            -        -
orders   pod-e    ended        20s ago   -            -        -
orders   pod-z    no session   -         -            5        1
orders   <none>   free         -         -            4        4
`
	tests := []struct {
		name string
		args []string
		want string
	}{{
		name: "a namespace: the single Leases as before, then the set's members with their shards and tokens",
		args: []string{"status", "-n", "team"},
		want: `LEASE          HOLDER   TOKEN   RENEWED    DURATION   EXPIRES IN
cache-warmer   pod-c    3       40s ago    15s        expired
free           <none>   8       5m3s ago   15s        -
kube-thing     <none>   0       -          -          -
nightly-run    pod-a    7       2s ago     15s        13s

` + setTable,
	}, {
		name: "one set by its name, with the Events on its Leases",
		args: []string{"status", "orders", "--events=2"},
		want: setTable + `
Events:
  TIME      TYPE     REASON           LEASE                 FROM    MESSAGE
  20s ago   Normal   LeaderElection   orders-1              pod-b   shard 1 moved from pod-a to pod-b (rebalance), token 5
  15s ago   Normal   LeaderElection   orders-member-pod-e   pod-a   ended the session of pod-e
`,
	}, {
		name: "a selector that selects only the set",
		args: []string{"status", "-l", shards.SetLabel + "=orders", "-o", "wide"},
		want: `SET      MEMBER   STATE        RENEWED   EXPIRES IN   SHARDS   TOKENS          SESSION LEASE         RENEW TIME
orders   pod-a    live         1s ago    14s          0,2      3,2(old term)   orders-member-pod-a   2025-06-01T11:59:59Z
orders   pod-b    live         2s ago    13s          1,10     5,9             orders-member-pod-b   2025-06-01T11:59:58Z
orders   pod-c    expired      40s ago   expired      3        7               orders-member-pod-c   2025-06-01T11:59:20Z
orders   pod-d    left         5m ago    -            -        -               orders-member-pod-d   2025-06-01T11:55:00Z
orders   pod-e    ended        20s ago   -            -        -               orders-member-pod-e   2025-06-01T11:59:40Z
orders   pod-z    no session   -         -            5        1               <none>                -
orders   <none>   free         -         -            4        4               <none>                -
`,
	}, {
		name: "all namespaces: a set's Leases are shown although the test's Leases carry the incarnation annotation only",
		args: []string{"status", "-A", "-l", shards.RoleLabel + "=shard"},
		want: `NAMESPACE   SET      MEMBER   STATE        RENEWED   EXPIRES IN   SHARDS   TOKENS
team        orders   pod-a    no session   -         -            0,2      3,2
team        orders   pod-b    no session   -         -            1,10     5,9
team        orders   pod-c    no session   -         -            3        7
team        orders   pod-z    no session   -         -            5        1
team        orders   <none>   free         -         -            4        4
`,
	}, {
		name: "names: every Lease of the set",
		args: []string{"status", "orders", "-o", "name"},
		want: `lease.coordination.k8s.io/orders-0
lease.coordination.k8s.io/orders-1
lease.coordination.k8s.io/orders-10
lease.coordination.k8s.io/orders-2
lease.coordination.k8s.io/orders-3
lease.coordination.k8s.io/orders-4
lease.coordination.k8s.io/orders-5
lease.coordination.k8s.io/orders-member-pod-a
lease.coordination.k8s.io/orders-member-pod-b
lease.coordination.k8s.io/orders-member-pod-c
lease.coordination.k8s.io/orders-member-pod-d
lease.coordination.k8s.io/orders-member-pod-e
`,
	}, {
		name: "jsonpath over one set: each member's shards and tokens",
		args: []string{"status", "orders", `-o=jsonpath={.shards} {.held} {.live}{"\n"}{range .members[*]}{.identity}={.state}:{range .shards[*]}{.index}/{.token}/{.valid} {end}{"\n"}{end}`},
		want: `7 3 2
pod-a=live:0/3/true 2/2/false 
pod-b=live:1/5/true 10/9/true 
pod-c=expired:3/7/false 
pod-d=left:
pod-e=ended:
pod-z=no session:5/1/false 
<none>=free:4/4/false 
`,
	}, {
		name: "jsonpath over a list: the sets are its shardSets",
		args: []string{"status", "-n", "team", `-o=jsonpath={range .shardSets[*]}{.name}: {.members[0].identity} holds {.members[0].shards[0].lease}{end}`},
		want: "orders: pod-a holds orders-0",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := runPlugin(t, context.Background(), fake.NewClientset(setObjects()...), tc.args...)
			if r.code != ExitOK || r.stderr != "" {
				t.Fatalf("exit %d, stderr %q; want 0 and nothing", r.code, r.stderr)
			}
			if r.stdout != tc.want {
				t.Errorf("output:\n%s\nwant:\n%s", r.stdout, tc.want)
			}
		})
	}
}

// The single Leases' output is the same with a set next to them: the list's
// items are the Leases outside any set, the set is in shardSets.
func TestStatusJSONKeepsSingleLeasesAsItemsAndSetsApart(t *testing.T) {
	r := runPlugin(t, context.Background(), fake.NewClientset(setObjects()...), "status", "-n", "team", "-o", "json")
	if r.code != ExitOK || r.stderr != "" {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	var got LeaseStatusList
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("%v:\n%s", err, r.stdout)
	}
	var names []string
	for _, it := range got.Items {
		names = append(names, it.Name)
	}
	if strings.Join(names, " ") != "cache-warmer free kube-thing nightly-run" {
		t.Errorf("items %v, want the four Leases outside the set", names)
	}
	if len(got.ShardSets) != 1 {
		t.Fatalf("shardSets: %d, want 1:\n%s", len(got.ShardSets), r.stdout)
	}
	s := got.ShardSets[0]
	if s.Kind != "ShardSetStatus" || s.Namespace != "team" || s.Name != "orders" || s.Shards != 7 || s.Held != 3 || s.Live != 2 || len(s.Members) != 7 {
		t.Errorf("set %+v", s)
	}
	a := s.Members[0]
	if a.Identity != "pod-a" || a.State != MemberLive || a.Lease != "orders-member-pod-a" || a.ExpiresInMs == nil || *a.ExpiresInMs != 14000 ||
		len(a.Shards) != 2 || a.Shards[0] != (HeldShard{Index: 0, Lease: "orders-0", UID: "uid-orders-0", Token: 3, Valid: true}) || a.Shards[1].Valid {
		t.Errorf("pod-a: %+v", a)
	}

	// Without a set, the JSON has no shardSets key at all (as before).
	r = runPlugin(t, context.Background(), fake.NewClientset(objects()...), "status", "-n", "team", "-o", "json")
	if strings.Contains(r.stdout, "shardSets") {
		t.Errorf("a namespace without a set printed shardSets:\n%s", r.stdout)
	}
}

// A name that is neither a Lease nor a set is still kubectl's NotFound, and
// a set's shard Lease asked for by name is an ordinary Lease.
func TestStatusOfAnUnknownNameIsNotFoundAndAShardLeaseIsALease(t *testing.T) {
	client := fake.NewClientset(setObjects()...)
	r := runPlugin(t, context.Background(), client, "status", "nope")
	if r.code != ExitError || r.stderr != `Error from server (NotFound): leases.coordination.k8s.io "nope" not found`+"\n" {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
	r = runPlugin(t, context.Background(), client, "status", "orders-1", "--events=0")
	want := `LEASE      HOLDER   TOKEN   RENEWED   DURATION   EXPIRES IN
orders-1   pod-b    5       5s ago    15s        10s
`
	if r.code != ExitOK || r.stdout != want {
		t.Errorf("exit %d, stdout:\n%s\nwant:\n%s", r.code, r.stdout, want)
	}
}

func TestShardSetsDeepCopyIsIndependent(t *testing.T) {
	var leases []*coordinationv1.Lease
	for _, o := range setObjects() {
		if l, ok := o.(*coordinationv1.Lease); ok {
			leases = append(leases, l)
		}
	}
	sets := ShardSets(leases, now)
	list := &LeaseStatusList{ShardSets: sets}
	cp := list.DeepCopyObject().(*LeaseStatusList)
	*cp.ShardSets[0].Members[0].ExpiresInMs = 1
	cp.ShardSets[0].Members[0].Shards[0].Token = 99
	if *sets[0].Members[0].ExpiresInMs == 1 || sets[0].Members[0].Shards[0].Token == 99 {
		t.Error("the copy shares the set's members or shards")
	}
	one := sets[0].DeepCopyObject().(*ShardSetStatus)
	one.Members[1].Shards[0].Index = 42
	if sets[0].Members[1].Shards[0].Index == 42 {
		t.Error("ShardSetStatus.DeepCopyObject shares the shards")
	}
}
