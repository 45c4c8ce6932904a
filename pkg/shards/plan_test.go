package shards

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
)

// apply returns the owners after every planned move.
func apply(owner []string, moves map[int]string) []string {
	out := append([]string(nil), owner...)
	for i, to := range moves {
		out[i] = to
	}
	return out
}

func counts(owner []string) map[string]int {
	c := map[string]int{}
	for _, o := range owner {
		c[o]++
	}
	return c
}

func TestPlanGivesEveryMemberAFairShareInOneRound(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 2000 {
		n := 1 + r.IntN(40)
		m := 1 + r.IntN(7)
		var members []string
		for k := range m {
			members = append(members, fmt.Sprintf("m%d", k))
		}
		owner := make([]string, n)
		for i := range owner {
			switch r.IntN(4) {
			case 0: // free
			case 1:
				owner[i] = "gone" // a member that is not live
			default:
				owner[i] = members[r.IntN(m)]
			}
		}
		after := apply(owner, plan(members, owner))
		c := counts(after)
		for _, id := range members {
			if c[id] < n/m || c[id] > (n+m-1)/m {
				t.Fatalf("round %d: %d shards over %d members: %s holds %d after the plan (owners %v → %v)", round, n, m, id, c[id], owner, after)
			}
		}
		if again := plan(members, after); len(again) != 0 {
			t.Fatalf("round %d: a fair share still plans moves %v", round, again)
		}
	}
}

func TestPlanMovesOnlyWhatAJoiningMemberNeeds(t *testing.T) {
	// 16 shards over a, b, c (6, 5, 5); d joins: exactly 4 shards move,
	// each once, all to d.
	owner := make([]string, 16)
	for i := range owner {
		owner[i] = []string{"a", "b", "c"}[min(i/5, 2)]
	}
	owner[15] = "a" // a: 0-4 and 15 (6), b: 5-9, c: 10-14
	moves := plan([]string{"a", "b", "c", "d"}, owner)
	if len(moves) != 4 {
		t.Fatalf("moves = %v, want 4", moves)
	}
	for i, to := range moves {
		if to != "d" {
			t.Errorf("shard %d planned for %s, want d", i, to)
		}
	}
	if c := counts(apply(owner, moves)); c["a"] != 4 || c["b"] != 4 || c["c"] != 4 || c["d"] != 4 {
		t.Errorf("after the plan: %v", c)
	}
}

func TestPlanIsTheSameWhateverTheMembersOrder(t *testing.T) {
	owner := []string{"b", "", "c", "c", "c", "x", "", "b"}
	want := plan([]string{"a", "b", "c"}, owner)
	for _, ms := range [][]string{{"c", "b", "a"}, {"b", "a", "c"}} {
		if got := plan(ms, owner); !maps.Equal(got, want) {
			t.Errorf("plan(%v) = %v, want %v", ms, got, want)
		}
	}
}

func TestPlanLeavesAFairSetAlone(t *testing.T) {
	owner := []string{"a", "b", "c", "a", "b", "c", "a"}
	if moves := plan([]string{"a", "b", "c"}, owner); len(moves) != 0 {
		t.Errorf("moves = %v, want none", moves)
	}
}
