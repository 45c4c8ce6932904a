package testsupport

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// The waits of every test (the root module's unit tests, and the test module:
// integration, chart, e2e, harnesses, via test/framework): thin wrappers around
// k8s.io/apimachinery's wait.PollUntilContextTimeout that only add a message
// saying what was awaited. Tests wait on these conditions, never on sleeps.

// PollInterval is a good default interval for local conditions (a local API,
// a log buffer, the apiserver on this machine).
const PollInterval = 50 * time.Millisecond

// Poll calls cond at once and then every interval until it returns true
// (nil), returns an error (that error), or timeout passes or ctx is done (an
// error saying so; wait.Interrupted reports true for it).
func Poll(ctx context.Context, interval, timeout time.Duration, cond func(ctx context.Context) (bool, error)) error {
	err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, cond)
	if err != nil && wait.Interrupted(err) {
		return fmt.Errorf("not within %v: %w", timeout, err)
	}
	return err
}

// Eventually calls cond at once and then every interval until it returns nil.
// If timeout passes first (or ctx is done) the error names what and cond's
// last error.
func Eventually(ctx context.Context, interval, timeout time.Duration, what string, cond func(ctx context.Context) error) error {
	last := fmt.Errorf("not checked")
	err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(ctx context.Context) (bool, error) {
		last = cond(ctx)
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("%s: not true within %v (%v): %w", what, timeout, err, last)
	}
	return nil
}

// Consistently calls cond at once and then every interval for the whole
// duration and fails at the first error, naming what and when. It is for
// claims about a period ("no second leader over two lease durations"), whose
// length is the claim itself.
func Consistently(ctx context.Context, interval, duration time.Duration, what string, cond func(ctx context.Context) error) error {
	start := time.Now()
	err := wait.PollUntilContextTimeout(ctx, interval, duration, true, func(pctx context.Context) (bool, error) {
		err := cond(pctx)
		// A client-side rate limiter refuses a wait that would end after the
		// deadline before the deadline comes: that, too, is the period ending.
		ending := pctx.Err() != nil || (err != nil && strings.Contains(err.Error(), "would exceed context deadline"))
		if err != nil && !ending {
			return false, fmt.Errorf("%s: broken after %v of %v: %w", what, time.Since(start).Round(time.Millisecond), duration, err)
		}
		return false, nil // an error caused by the period ending is not a violation
	})
	if err != nil && wait.Interrupted(err) && ctx.Err() == nil {
		return nil // the whole period passed
	}
	return err
}
