package main

import (
	"fmt"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// What both soaks' reports share (the single-Lease soak's report in
// lease_report.go, the shard soak's in shards_report.go): the faults line,
// the writers' counts, the invariant lines and the verdict.

// faultCounts is the report's faults line: each kind with its count, sorted.
func (s *soak) faultCounts() string {
	var names []string
	s.faults.Range(func(k, v any) bool {
		names = append(names, fmt.Sprintf("%s %d", k, v.(*atomic.Int64).Load()))
		return true
	})
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// printWrites prints the writers' counts and the first other write errors;
// acceptedMore follows the count of accepted writes.
func (s *soak) printWrites(acceptedMore string) {
	fmt.Printf("writes attempted    %d\n", s.attempted.Load())
	fmt.Printf("writes accepted     %d%s\n", s.accepted.Load(), acceptedMore)
	fmt.Printf("rejected as stale   %d\n", s.stale.Load())
	fmt.Printf("other write errors  %d\n", s.writeErrs.Load()-s.dbRestartErrs.Load())
	s.errMu.Lock()
	for _, e := range s.errSamples {
		fmt.Printf("    %s\n", e)
	}
	s.errMu.Unlock()
}

// invariants prints each invariant's line; ok until one broke.
type invariants struct{ ok bool }

// check prints name as OK if there are no problems, or as BROKEN with the
// first ten of them.
func (iv *invariants) check(name string, problems []string) {
	if len(problems) == 0 {
		fmt.Printf("invariant OK        %s\n", name)
		return
	}
	iv.ok = false
	fmt.Printf("invariant BROKEN    %s: %d violation(s)\n", name, len(problems))
	for i, p := range problems {
		if i == 10 {
			fmt.Printf("    ... and %d more\n", len(problems)-10)
			break
		}
		fmt.Printf("    %s\n", p)
	}
}

// result prints the verdict line and returns it.
func (iv *invariants) result() bool {
	fmt.Println(map[bool]string{true: "RESULT: PASS", false: "RESULT: FAIL"}[iv.ok])
	return iv.ok
}

// tokenWriters is invariant 4's record: token -> the processes whose write
// with it was accepted.
type tokenWriters map[int64]map[string]bool

func (tw tokenWriters) add(token int64, writer string) {
	if tw[token] == nil {
		tw[token] = map[string]bool{}
	}
	tw[token][writer] = true
}

// problems lists, sorted, every token accepted from more than one process.
func (tw tokenWriters) problems() []string {
	var p []string
	for tok, ws := range tw {
		if len(ws) > 1 {
			var names []string
			for n := range ws {
				names = append(names, n)
			}
			sort.Strings(names)
			p = append(p, fmt.Sprintf("token %d accepted from %v", tok, names))
		}
	}
	sort.Strings(p)
	return p
}

// details are the violations' lines.
func details(vs []framework.Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Detail)
	}
	return out
}
