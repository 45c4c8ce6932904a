package shards

import (
	"cmp"
	"slices"
)

// plan is the set's fair share, computed the same by every member from the
// same view: members are the live members' identities, owner[i] the live
// member holding shard i ("" when none: free, absent, or its holder's
// session is not live). It returns, for every shard that must move, the
// member that gets it; shards that stay are absent from the map.
func plan(members []string, owner []string) map[int]string {
	n, m := len(owner), len(members)
	if m == 0 || n == 0 {
		return nil
	}
	held := make(map[string][]int, m)
	for _, id := range members {
		held[id] = nil
	}
	var place []int
	for i, o := range owner {
		if _, live := held[o]; o != "" && live {
			held[o] = append(held[o], i)
		} else {
			place = append(place, i)
		}
	}
	// The members holding the most keep the larger shares: fewest moves.
	byHeld := slices.Clone(members)
	slices.SortStableFunc(byHeld, func(a, b string) int {
		if c := cmp.Compare(len(held[b]), len(held[a])); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	quota := make(map[string]int, m)
	for k, id := range byHeld {
		quota[id] = n / m
		if k < n%m {
			quota[id]++
		}
	}
	for _, id := range byHeld {
		if extra := len(held[id]) - quota[id]; extra > 0 {
			h := held[id]
			place = append(place, h[len(h)-extra:]...) // its highest shards
		}
	}
	slices.Sort(place)
	out := make(map[int]string, len(place))
	receivers := slices.Sorted(slices.Values(members))
	k := 0
	for _, id := range receivers {
		for need := quota[id] - len(held[id]); need > 0 && k < len(place); need-- {
			out[place[k]] = id
			k++
		}
	}
	return out
}
