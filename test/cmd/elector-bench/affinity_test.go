package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestPlanCPUsGivesTheServerTheHighestCPUAndTheRestToTheOthers(t *testing.T) {
	p, err := planCPUs([]int{3, 0, 1})
	if err != nil {
		t.Fatal(err)
	}
	if p.Server != 3 || !slices.Equal(p.Rest, []int{0, 1}) {
		t.Errorf("plan %+v, want server 3, rest [0 1]", p)
	}
	if want := "the server being measured pinned alone to CPU 3; the load generator, the control plane and the server not being measured to CPUs 0,1"; p.String() != want {
		t.Errorf("%q, want %q", p.String(), want)
	}
	p, err = planCPUs([]int{0, 1})
	if err != nil || p.Server != 1 || !slices.Equal(p.Rest, []int{0}) || !strings.HasSuffix(p.String(), "to CPU 0") {
		t.Errorf("2 CPUs: plan %+v %q, %v", p, p, err)
	}
	if _, err := planCPUs([]int{5}); err == nil || !strings.Contains(err.Error(), "--localapi-pin needs at least 2 CPUs") {
		t.Errorf("1 CPU: %v, want a clear error", err)
	}
}

func TestCPUMaskAndCPUListRoundTrip(t *testing.T) {
	cpus := []int{0, 2, 63, 64, 1023}
	set := cpuMask(cpus)
	if set.Count() != len(cpus) {
		t.Errorf("count %d", set.Count())
	}
	if got := cpuList(&set); !slices.Equal(got, cpus) {
		t.Errorf("cpuList %v, want %v", got, cpus)
	}
}

func TestParseStatPPIDReadsPastACommandWithSpacesAndParentheses(t *testing.T) {
	for stat, want := range map[string]int{
		"1234 (kube-apiserver) S 77 1234 1234 0 -1 4194560 ...": 77,
		"99 (a (b) c) R 1 99 99 0 -1":                           1,
	} {
		got, err := parseStatPPID([]byte(stat))
		if err != nil || got != want {
			t.Errorf("%q: %d, %v, want %d", stat, got, err, want)
		}
	}
	for _, bad := range []string{"", "12 (x", "12 (x) S"} {
		if _, err := parseStatPPID([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// fakeProc writes a /proc-like tree: pid -> (ppid, thread ids).
func fakeProc(t *testing.T, procs map[int]struct {
	ppid int
	tids []int
}) string {
	t.Helper()
	root := t.TempDir()
	for pid, p := range procs {
		dir := filepath.Join(root, strconv.Itoa(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, tid := range p.tids {
			if err := os.MkdirAll(filepath.Join(dir, "task", strconv.Itoa(tid)), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		stat := strconv.Itoa(pid) + " (p " + strconv.Itoa(pid) + ") S " + strconv.Itoa(p.ppid) + " 1 1 0\n"
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Not processes: ignored.
	if err := os.MkdirAll(filepath.Join(root, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestDescendantsListsTheWholeTreeUnderAProcess(t *testing.T) {
	type p = struct {
		ppid int
		tids []int
	}
	root := fakeProc(t, map[int]p{
		1: {0, []int{1}}, 10: {1, []int{10}}, // the bench
		20: {10, []int{20, 21}}, 21: {10, nil}, // etcd, the sidecar (no task dir: still listed)
		30: {20, []int{30}}, // a grandchild
		40: {1, []int{40}},  // someone else's
	})
	got, err := descendants(root, 10)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, []int{20, 21, 30}) {
		t.Errorf("descendants of 10: %v, want [20 21 30]", got)
	}
	tids, err := threadIDs(root, 20)
	if err != nil || !slices.Equal(tids, []int{20, 21}) {
		t.Errorf("threads of 20: %v, %v", tids, err)
	}
}

func TestSetProcessAffinityPinsThreadsStartedWhilePinning(t *testing.T) {
	root := fakeProc(t, map[int]struct {
		ppid int
		tids []int
	}{7: {1, []int{7, 8}}})
	set := cpuMask([]int{1})
	var calls []int
	err := setProcessAffinity(root, 7, set, func(tid int, s *unix.CPUSet) error {
		if *s != set {
			t.Errorf("thread %d: mask %v", tid, cpuList(s))
		}
		calls = append(calls, tid)
		switch tid {
		case 7: // starts a thread meanwhile
			if err := os.MkdirAll(filepath.Join(root, "7", "task", "9"), 0o755); err != nil {
				t.Fatal(err)
			}
		case 8: // exits meanwhile
			return unix.ESRCH
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(calls)
	if !slices.Equal(calls, []int{7, 8, 9}) {
		t.Errorf("threads set %v, want each of 7, 8, 9 once", calls)
	}
	err = setProcessAffinity(root, 7, set, func(int, *unix.CPUSet) error { return unix.EPERM })
	if !errors.Is(err, unix.EPERM) || !strings.Contains(err.Error(), "pid 7 thread") {
		t.Errorf("EPERM: %v", err)
	}
	if err := setProcessAffinity(root, 6, set, nil); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("no such process: %v", err)
	}
}

// The real thing, on this test's own process: every thread gets the mask,
// and restore puts the original back on every thread.
func TestPinnerPinsEveryThreadOfAGoProcessAndRestores(t *testing.T) {
	orig, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	masks := func() map[int][]int {
		tids, err := threadIDs("/proc", os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		m := map[int][]int{}
		for _, tid := range tids {
			var s unix.CPUSet
			if err := unix.SchedGetaffinity(tid, &s); err == nil {
				m[tid] = cpuList(&s)
			}
		}
		return m
	}
	p := newPinner()
	t.Cleanup(func() { _ = p.restore() })
	if err := p.pin(os.Getpid(), orig[:1]); err != nil {
		t.Fatal(err)
	}
	for tid, cpus := range masks() {
		if !slices.Equal(cpus, orig[:1]) {
			t.Errorf("pinned: thread %d on %v, want %v", tid, cpus, orig[:1])
		}
	}
	if err := p.restore(); err != nil {
		t.Fatal(err)
	}
	for tid, cpus := range masks() {
		if !slices.Equal(cpus, orig) {
			t.Errorf("restored: thread %d on %v, want %v", tid, cpus, orig)
		}
	}
}
