package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// The faults both soaks inject, and how: a fault drawn by weight every
// ~--fault-every (the single-Lease soak's kinds in main.go's inject, the
// shard soak's in shards.go's), the apiserver and database restarts, and
// the faults on one candidate's process (SIGSTOP+SIGCONT, SIGKILL, SIGTERM,
// restart). The single-Lease soak's faults on its Lease are in deletion.go
// and handedits.go.

// faultLoop calls inject every ~faultEvery until ctx ends, and logs the
// writes' progress every 10s; progress, if set, adds to that line.
func (s *soak) faultLoop(ctx context.Context, inject func(), progress func() string) {
	next := time.Now()
	lastReport := time.Now()
	for {
		next = next.Add(s.dur(s.o.faultEvery/2, s.o.faultEvery*3/2))
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
		inject()
		if time.Since(lastReport) > 10*time.Second {
			lastReport = time.Now()
			line := fmt.Sprintf("progress: writes %d (accepted %d, stale %d, errors %d, of them during a database restart %d)",
				s.attempted.Load(), s.accepted.Load(), s.stale.Load(), s.writeErrs.Load(), s.dbRestartErrs.Load())
			if progress != nil {
				line += progress()
			}
			s.logf("%s", line)
		}
	}
}

// drawFault draws one of kinds, each as likely as its weight.
func (s *soak) drawFault(kinds []string, weights []int) string {
	total := 0
	for _, w := range weights {
		total += w
	}
	r := s.intn(total)
	for i, w := range weights {
		if r < w {
			return kinds[i]
		}
		r -= w
	}
	return kinds[0]
}

// injectSoakFault starts kind if it is a fault of the whole soak, an
// apiserver or a database restart; false for any other kind.
func (s *soak) injectSoakFault(kind string) bool {
	switch kind {
	case "db-restart":
		if !s.dbDown.Load() {
			s.bg.Add(1)
			go func() { defer s.bg.Done(); s.restartDB() }()
		}
	case "apiserver-restart":
		s.injectAPIServerRestart()
	default:
		return false
	}
	return true
}

// injectAPIServerRestart SIGKILLs or stops the apiserver, and starts it
// again a while later, in the background; nothing if it is down already.
func (s *soak) injectAPIServerRestart() {
	if !s.apiDown.CompareAndSwap(false, true) {
		return
	}
	s.count("apiserver-restart")
	down := s.dur(time.Second, 2*s.o.timings.LeaseDuration)
	crash := s.intn(2) == 0
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		defer s.apiDown.Store(false)
		var err error
		if crash {
			err = s.cp.KillAPIServer()
		} else {
			err = s.cp.StopAPIServer(time.Second)
		}
		s.logf("fault: apiserver %s for %v (%v)", map[bool]string{true: "SIGKILLed", false: "stopped"}[crash], down.Round(time.Millisecond), err)
		time.Sleep(down)
		if err := s.cp.StartAPIServer(); err != nil {
			s.logf("apiserver restart failed: %v", err)
		}
	}()
}

// available returns the slots that are up and have no fault in progress.
func (s *soak) available() []*slot {
	var out []*slot
	for _, sl := range s.slots {
		sl.mu.Lock()
		ok := !sl.down && !sl.pending
		sl.mu.Unlock()
		if ok {
			out = append(out, sl)
		}
	}
	return out
}

// onSlot runs f in the background with a fault in progress on sl.
func (s *soak) onSlot(sl *slot, f func()) {
	sl.mu.Lock()
	sl.pending = true
	sl.mu.Unlock()
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		defer func() { sl.mu.Lock(); sl.pending = false; sl.mu.Unlock() }()
		f()
	}()
}

// processFault starts fault kind (sigstop, sigkill, sigterm or restart) on
// c, sl's process, in the background. A SIGSTOP is mostly longer than a
// lease when long says so (checked as the fault starts), so that the late
// writes meet a higher token; freeze is the soak's SIGSTOP of c with its
// writer, and returns the SIGCONT, which sends the writes it had in flight.
func (s *soak) processFault(sl *slot, c *framework.Candidate, kind string, long func() bool, freeze func(*slot, *framework.Candidate) (thaw func())) {
	// Keep at least two candidates up, so a token never goes backwards (the
	// contract: while any candidate that saw the Lease, or any member that
	// saw the set, runs).
	if (kind == "sigkill" || kind == "sigterm") && s.up() <= 2 {
		kind = "sigstop"
	}
	s.count(kind)
	s.onSlot(sl, func() {
		switch kind {
		case "sigstop":
			d := s.dur(s.o.timings.RetryPeriod, 2*s.o.timings.LeaseDuration)
			if long() && s.intn(4) != 0 {
				// mostly long enough for a takeover, so the late write meets a higher token
				d = s.dur(s.o.timings.LeaseDuration+time.Second, 2*s.o.timings.LeaseDuration+time.Second)
			}
			thaw := freeze(sl, c)
			s.logf("fault: SIGSTOP %s for %v", c.Instance, d.Round(time.Millisecond))
			time.Sleep(d)
			thaw()
		case "sigkill", "sigterm":
			sl.mu.Lock()
			sl.down = true
			sl.mu.Unlock()
			if kind == "sigkill" {
				_ = c.Kill()
			} else {
				_ = c.Terminate()
			}
			code, _ := c.Wait(5 * time.Second)
			d := s.dur(0, 2*s.o.timings.LeaseDuration)
			signal := strings.ToUpper(kind)
			if s.o.shards > 0 {
				signal = kind // the shard soak's log line has it in lower case
			}
			s.logf("fault: %s %s (exit %d), restart in %v", signal, c.Instance, code, d.Round(time.Millisecond))
			time.Sleep(d)
			s.restart(sl)
		case "restart":
			_ = c.Terminate()
			code, _ := c.Wait(5 * time.Second)
			s.logf("fault: restart %s (exit %d)", c.Instance, code)
			s.restart(sl)
		}
	})
}

// pause SIGSTOPs c, sl's process, and marks sl paused: its writer freezes
// with the answer it holds until unpause.
func (sl *slot) pause(c *framework.Candidate) {
	_ = c.Pause()
	sl.mu.Lock()
	sl.paused, sl.resume = true, make(chan struct{})
	sl.mu.Unlock()
}

// unpause SIGCONTs c, sl's process, and lets its writer go on.
func (sl *slot) unpause(c *framework.Candidate) {
	_ = c.Resume()
	sl.mu.Lock()
	sl.paused = false
	close(sl.resume)
	sl.mu.Unlock()
}

// thawed waits, if paused, until resume is closed: a writer frozen with
// what it holds, like its process. False if ctx ended first.
func thawed(ctx context.Context, paused bool, resume <-chan struct{}) bool {
	if paused && resume != nil {
		select {
		case <-resume:
		case <-ctx.Done():
			return false
		}
	}
	return true
}
