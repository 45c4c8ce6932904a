package leaderlabel

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
)

// The timing around Sync: Run's passes on change, retry and resync, and
// the removal when it stops.

// Run reconciles the label with src's status until ctx ends: a pass at
// start, after every change src reports, every ResyncPeriod while it leads
// (reading its pod and listing the labelled pods again), and again after a
// back-off while a pass fails. When ctx ends
// it removes the label from its own pod unless src says it still leads
// (bounded by StopTimeout), and returns.
func (l *Labeler) Run(ctx context.Context, src Source) {
	backoff := l.cfg.Backoff
	var (
		timer clock.Timer
		retry <-chan time.Time
	)
	resync := l.clock.NewTicker(l.cfg.ResyncPeriod)
	defer resync.Stop()
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	defer l.stop(ctx, src)
	for {
		changed := src.Changed() // before Status: a change after this read closes it
		err := l.sync(ctx, src.Status)
		if timer != nil {
			timer.Stop()
			timer, retry = nil, nil
		}
		if err != nil && ctx.Err() == nil {
			d := backoff.Step()
			l.log.Warn("leader label: will retry", "in", d.Round(time.Millisecond), "err", err)
			timer = l.clock.NewTimer(d)
			retry = timer.C()
		} else if err == nil {
			backoff = l.cfg.Backoff
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-retry:
		case <-resync.C():
			if src.Status().IsLeader {
				l.forget() // as the pods are: ours, and the others labelled
			}
		}
	}
}

// forget makes the next pass read the pods again.
func (l *Labeler) forget() {
	select {
	case l.sem <- struct{}{}:
	default:
		return // a pass or BeforeRelease runs: it reads what it needs
	}
	l.self, l.cleanedTerm = nil, 0
	<-l.sem
}

// stop removes the label from our pod when Run ends, unless src says we
// still lead: read the pod, patch it if it carries the label, retrying until
// StopTimeout.
func (l *Labeler) stop(ctx context.Context, src Source) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.StopTimeout)
	defer cancel()
	select {
	case l.sem <- struct{}{}:
	case <-sctx.Done():
		l.log.Warn("leader label: not removed at stop: a pass was still running")
		return
	}
	defer func() { <-l.sem }()
	backoff := wait.Backoff{Duration: 20 * time.Millisecond, Factor: 2, Steps: 1 << 30, Cap: 200 * time.Millisecond}
	for {
		if src.Status().IsLeader {
			return
		}
		l.self = nil // as the pod is, not as remembered
		err := l.setSelf(sctx, false)
		if err == nil {
			return
		}
		select {
		case <-sctx.Done():
			l.log.Warn("leader label: not removed at stop", "err", err)
			return
		case <-l.clock.After(backoff.Step()):
		}
	}
}
