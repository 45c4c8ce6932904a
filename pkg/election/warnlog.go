package election

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// apiWarnings logs failed API server requests as warnings without flooding
// the log during an outage: the first failure at once, then at most one per
// interval, each with the number of failures it stood for since the last
// one. Without it a sidecar whose API server refuses connections logged
// nothing while its list and watch kept failing (only
// elector_api_errors_total rose). It is called where that metric is
// counted, from any goroutine.
type apiWarnings struct {
	log      *slog.Logger
	clock    clock.PassiveClock
	interval time.Duration

	mu         sync.Mutex
	logged     bool      // a warning was logged
	last       time.Time // when
	suppressed int       // failures since then that were not logged
}

func newAPIWarnings(log *slog.Logger, c clock.PassiveClock, interval time.Duration) *apiWarnings {
	return &apiWarnings{log: log, clock: c, interval: interval}
}

// failed records one failed request (verb as in elector_api_errors_total)
// and logs it unless a warning was logged less than an interval ago. A
// request cut short by our own shutdown is no failure worth a warning.
func (w *apiWarnings) failed(verb string, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	w.mu.Lock()
	now := w.clock.Now()
	if w.logged && now.Sub(w.last) < w.interval {
		w.suppressed++
		w.mu.Unlock()
		return
	}
	suppressed := w.suppressed
	w.logged, w.last, w.suppressed = true, now, 0
	w.mu.Unlock()
	w.log.Warn("API server request failed", "verb", verb, "err", err,
		"suppressed", suppressed, "interval", w.interval)
}
