package testsupport

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// A client-side rate limiter refuses, before the deadline, a wait that would
// end after it (client-go: "client rate limiter Wait returned an error: rate:
// Wait(n=1) would exceed context deadline"). At the end of a Consistently
// period that is the period ending, not a broken claim.
func TestConsistentlyTakesARateLimiterRefusalAtThePeriodsEndForItsEnd(t *testing.T) {
	limiter := rate.NewLimiter(rate.Every(time.Hour), 1)
	calls := 0
	err := Consistently(context.Background(), 10*time.Millisecond, 100*time.Millisecond, "the claim", func(ctx context.Context) error {
		calls++
		return limiter.Wait(ctx) // the first call takes the one token; later ones would wait an hour
	})
	if err != nil {
		t.Fatalf("Consistently = %v after %d calls; want nil (every later wait was refused for the deadline)", err, calls)
	}
}

func TestConsistentlyFailsOnABrokenClaim(t *testing.T) {
	n := 0
	err := Consistently(context.Background(), 10*time.Millisecond, time.Minute, "the claim", func(context.Context) error {
		if n++; n == 3 {
			return errors.New("two leaders")
		}
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "the claim: broken after") || !strings.Contains(err.Error(), "two leaders") {
		t.Fatalf("Consistently = %v, want the broken claim named", err)
	}
}
