package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// CPU pinning for the localapi section (--localapi-pin). On 2 cores the
// load generator, the server under test and the control plane otherwise
// share both CPUs, and the p99 measures the scheduler as much as the
// handler. With pinning, the server being measured runs alone on one CPU;
// the bench (the load generator), the control plane, the server not being
// measured and every other child of the bench run on the others.
//
// sched_setaffinity acts on one thread, and a Go process has many, so a
// process is pinned thread by thread (/proc/PID/task/*), as `taskset -a -p`
// does. Threads created later inherit the mask of the thread creating
// them, so once every thread is pinned the process stays pinned.

// cpuPlan splits the CPUs the bench may use.
type cpuPlan struct {
	Server int   `json:"serverCpu"` // the server under test
	Rest   []int `json:"restCpus"`  // the load generator and everything else
}

// planCPUs gives the server under test the highest allowed CPU and the
// rest to the others.
func planCPUs(allowed []int) (cpuPlan, error) {
	if len(allowed) < 2 {
		return cpuPlan{}, fmt.Errorf("--localapi-pin needs at least 2 CPUs, the bench may use %d (%v)", len(allowed), allowed)
	}
	cpus := slices.Clone(allowed)
	slices.Sort(cpus)
	return cpuPlan{Server: cpus[len(cpus)-1], Rest: cpus[:len(cpus)-1]}, nil
}

func (p cpuPlan) String() string {
	rest := make([]string, len(p.Rest))
	for i, c := range p.Rest {
		rest[i] = strconv.Itoa(c)
	}
	s := "s"
	if len(p.Rest) == 1 {
		s = ""
	}
	return fmt.Sprintf("the server being measured pinned alone to CPU %d; the load generator, the control plane and the server not being measured to CPU%s %s", p.Server, s, strings.Join(rest, ","))
}

// cpuList is the CPUs in set, ascending.
func cpuList(set *unix.CPUSet) []int {
	var cpus []int
	for i := 0; i < len(set)*64; i++ {
		if set.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	return cpus
}

func cpuMask(cpus []int) unix.CPUSet {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	return set
}

// allowedCPUs is the CPUs this process may run on.
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	return cpuList(&set), nil
}

// threadIDs lists the threads of process pid under procRoot (/proc).
func threadIDs(procRoot string, pid int) ([]int, error) {
	ents, err := os.ReadDir(filepath.Join(procRoot, strconv.Itoa(pid), "task"))
	if err != nil {
		return nil, err
	}
	var tids []int
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

// parseStatPPID reads the parent pid from /proc/PID/stat ("pid (comm)
// state ppid ..."; comm may hold spaces and parentheses).
func parseStatPPID(stat []byte) (int, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("bad stat %q", stat)
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 2 {
		return 0, fmt.Errorf("bad stat %q", stat)
	}
	return strconv.Atoi(f[1])
}

// descendants lists every process under root (children, their children...)
// from procRoot (/proc), in no particular order.
func descendants(procRoot string, root int) ([]int, error) {
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, err
	}
	children := map[int][]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		ppid, err := parseStatPPID(b)
		if err != nil {
			return nil, err
		}
		children[ppid] = append(children[ppid], pid)
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out, nil
}

// setProcessAffinity sets set on every thread of pid, until a listing of its
// threads shows none it has not set (threads started meanwhile by a thread
// not yet pinned). Threads that exit meanwhile are skipped.
func setProcessAffinity(procRoot string, pid int, set unix.CPUSet, setThread func(tid int, set *unix.CPUSet) error) error {
	done := map[int]bool{}
	for pass := 0; pass < 100; pass++ {
		tids, err := threadIDs(procRoot, pid)
		if err != nil {
			return fmt.Errorf("pid %d: %w", pid, err)
		}
		fresh := 0
		for _, tid := range tids {
			if done[tid] {
				continue
			}
			fresh++
			if err := setThread(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("sched_setaffinity pid %d thread %d: %w", pid, tid, err)
			}
			done[tid] = true
		}
		if fresh == 0 {
			return nil
		}
	}
	return fmt.Errorf("pid %d: its threads kept changing while being pinned", pid)
}

// pinner pins processes and puts back each one's affinity from before its
// first pin.
type pinner struct {
	procRoot string
	orig     map[int]unix.CPUSet
	order    []int
}

func newPinner() *pinner { return &pinner{procRoot: "/proc", orig: map[int]unix.CPUSet{}} }

func schedSetaffinity(tid int, set *unix.CPUSet) error { return unix.SchedSetaffinity(tid, set) }

// pin sets every thread of pid to cpus; a process gone meanwhile is skipped.
func (p *pinner) pin(pid int, cpus []int) error {
	if _, ok := p.orig[pid]; !ok {
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(pid, &set); err != nil {
			if errors.Is(err, unix.ESRCH) {
				return nil
			}
			return fmt.Errorf("sched_getaffinity pid %d: %w", pid, err)
		}
		p.orig[pid] = set
		p.order = append(p.order, pid)
	}
	err := setProcessAffinity(p.procRoot, pid, cpuMask(cpus), schedSetaffinity)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// restore puts back every pinned process's affinity (skipping those gone).
func (p *pinner) restore() error {
	var errs []error
	for _, pid := range p.order {
		err := setProcessAffinity(p.procRoot, pid, p.orig[pid], schedSetaffinity)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	p.orig, p.order = map[int]unix.CPUSet{}, nil
	return errors.Join(errs...)
}

// gomaxprocsSettle: Go programs (the bench, both servers) lower GOMAXPROCS
// to their CPU count within about a second of a change of affinity (the
// runtime checks once a second); the first run must not see that.
const gomaxprocsSettle = 2 * time.Second

// pinLocalAPI pins the bench and every process under it (the control
// plane, both servers) to the plan's other CPUs; the caller then moves
// the server being measured to plan.Server before each run, and restores.
func pinLocalAPI() (*pinner, cpuPlan, error) {
	cpus, err := allowedCPUs()
	if err != nil {
		return nil, cpuPlan{}, err
	}
	plan, err := planCPUs(cpus)
	if err != nil {
		return nil, plan, err
	}
	pin := newPinner()
	pids, err := descendants(pin.procRoot, os.Getpid())
	if err != nil {
		return pin, plan, err
	}
	for _, pid := range append([]int{os.Getpid()}, pids...) {
		if err := pin.pin(pid, plan.Rest); err != nil {
			return pin, plan, err
		}
	}
	time.Sleep(gomaxprocsSettle)
	return pin, plan, nil
}

// localAPIPinText is the localapi section's description of the pinning.
func localAPIPinText(on bool) string {
	if !on {
		return "no CPU pinning (--localapi-pin=false)"
	}
	cpus, err := allowedCPUs()
	if err != nil {
		return "CPU pinning: " + err.Error()
	}
	plan, err := planCPUs(cpus)
	if err != nil {
		return "CPU pinning: " + err.Error()
	}
	return plan.String() + " (--localapi-pin)"
}
