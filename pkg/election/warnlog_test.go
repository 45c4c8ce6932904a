package election

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// TestAPIWarningsFirstAtOnceThenOnePerIntervalWithCount: the first failure
// is logged at once; failures within the interval are only counted; the
// next one after the interval is logged with that count.
func TestAPIWarningsFirstAtOnceThenOnePerIntervalWithCount(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	w := newAPIWarnings(log, clk, 10*time.Second)
	refused := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")

	lines := func() []map[string]any {
		t.Helper()
		var out []map[string]any
		dec := json.NewDecoder(bytes.NewReader(buf.Bytes()))
		for dec.More() {
			var m map[string]any
			if err := dec.Decode(&m); err != nil {
				t.Fatal(err)
			}
			out = append(out, m)
		}
		return out
	}

	w.failed("list", refused)
	got := lines()
	if len(got) != 1 || got[0]["level"] != "WARN" || got[0]["verb"] != "list" || got[0]["err"] != refused.Error() || got[0]["suppressed"] != 0.0 {
		t.Fatalf("after the first failure: %v, want one warning for list with suppressed 0", got)
	}
	for range 4 {
		clk.SetTime(clk.Now().Add(2 * time.Second))
		w.failed("watch", refused)
	}
	if got := lines(); len(got) != 1 {
		t.Fatalf("failures within the interval were logged: %v", got)
	}
	// A shutdown's cancelled request is neither logged nor counted.
	w.failed("watch", context.Canceled)
	clk.SetTime(clk.Now().Add(2 * time.Second)) // 10 s after the first warning
	w.failed("watch", refused)
	got = lines()
	if len(got) != 2 || got[1]["verb"] != "watch" || got[1]["suppressed"] != 4.0 {
		t.Fatalf("after the interval: %v, want a second warning for watch with suppressed 4", got)
	}
	clk.SetTime(clk.Now().Add(9 * time.Second))
	w.failed("list", refused)
	clk.SetTime(clk.Now().Add(time.Second))
	w.failed("list", refused)
	got = lines()
	if len(got) != 3 || got[2]["suppressed"] != 1.0 {
		t.Fatalf("third interval: %v, want a third warning with suppressed 1", got)
	}
}
