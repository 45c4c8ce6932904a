package localapi

import (
	"encoding/json"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

// TestWatchEncodesEachEventOnceForEveryStream: 20 streams follow three
// changes; each event is encoded once and written to every stream, byte
// for byte what encoding/json writes for the state, and a stream that
// writes a leader's event later counts its expiresInMs down to that
// instant.
func TestWatchEncodesEachEventOnceForEveryStream(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	el := &fakeElector{status: leading, alive: true}
	h := NewHandler(el, nil, WithClock(clk))
	url, client := serve(t, h)
	want := func(s LeaderResponse) string {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	var streams []*stream
	for range 20 {
		streams = append(streams, openWatch(t, client, url, nil))
	}
	check := func(step string, wantEncoded int64, wantData string) {
		t.Helper()
		for i, s := range streams {
			ev, _ := s.nextLeader()
			if ev.Data != wantData {
				t.Fatalf("%s: stream %d got\n%s\nwant\n%s", step, i, ev.Data, wantData)
			}
		}
		if n := h.events.encoded.Load(); n != wantEncoded {
			t.Fatalf("%s: %d events encoded for %d streams, want %d", step, n, len(streams), wantEncoded)
		}
	}
	check("the first state", 1, want(newLeaderResponse(&leading, appNone)))

	el.set(following)
	check("a follower's state", 2, want(newLeaderResponse(&following, appNone)))

	renewed := leading
	renewed.ValidUntil = leading.ValidUntil.Add(time.Second)
	el.set(renewed)
	check("a renewed leader", 3, want(newLeaderResponse(&renewed, appNone)))

	// A stream that comes 1 s later gets the same event, with 1 s less.
	clk.Step(time.Second)
	late := openWatch(t, client, url, nil)
	_, r := late.nextLeader()
	if wantMs := renewed.ExpiresIn.Milliseconds() - 1000; r.ExpiresInMs != wantMs || !r.IsLeader || r.Token != renewed.Token {
		t.Fatalf("a stream opened 1s after the event was encoded got %+v, want expiresInMs %d", r, wantMs)
	}
	if n := h.events.encoded.Load(); n != 3 {
		t.Fatalf("the late stream's event was encoded again (%d encoded), want the shared one", n)
	}
	// Past its validity, the event is not reused: it is encoded from the
	// state as it is then.
	clk.Step(renewed.ExpiresIn)
	again := openWatch(t, client, url, nil)
	again.nextLeader()
	if n := h.events.encoded.Load(); n != 4 {
		t.Fatalf("%d events encoded after the shared one's validity ran out, want 4", n)
	}
}
