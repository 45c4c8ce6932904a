package sidecar

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"
)

// TestJSONLogsHaveOneLoggerKeyAndDurationStrings: a JSON line of
// client-go's named loggers carries "logger" once, and durations are
// written as "15s", not as integer nanoseconds.
func TestJSONLogsHaveOneLoggerKeyAndDurationStrings(t *testing.T) {
	var buf bytes.Buffer
	log := NewLogger(&Config{LogFormat: "json", LogLevel: "info"}, &buf)
	defer klog.ClearLogger()
	log.Info("starting", "leaseDuration", 15*time.Second)
	klog.Background().WithName("reflector").Info("watch failed", "backoff", 800*time.Millisecond)

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines, got %d:\n%s", len(lines), buf.String())
	}
	var ours map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &ours); err != nil {
		t.Fatal(err)
	}
	if ours["leaseDuration"] != "15s" {
		t.Errorf("leaseDuration %#v, want \"15s\": %s", ours["leaseDuration"], lines[0])
	}
	if n := strings.Count(lines[1], `"logger":`); n != 1 {
		t.Errorf("client-go line has the logger key %d times: %s", n, lines[1])
	}
	var theirs map[string]any
	if err := json.Unmarshal([]byte(lines[1]), &theirs); err != nil {
		t.Fatal(err)
	}
	if theirs["logger"] != "client-go/reflector" || theirs["backoff"] != "800ms" {
		t.Errorf("client-go line %s: want logger \"client-go/reflector\" and backoff \"800ms\"", lines[1])
	}
}

// TestClientGoVerboseLinesSayDebug: at --log-level=debug client-go's
// V(1) to V(4) lines are logged, each with level DEBUG (not DEBUG+3).
func TestClientGoVerboseLinesSayDebug(t *testing.T) {
	var buf bytes.Buffer
	NewLogger(&Config{LogFormat: "json", LogLevel: "debug"}, &buf)
	defer klog.ClearLogger()
	klog.Background().WithName("reflector").V(1).Info("Starting reflector")
	klog.Background().V(4).Info("Watch close")
	klog.Background().V(5).Info("too verbose")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want the V(1) and V(4) lines, got:\n%s", buf.String())
	}
	for _, l := range lines {
		if !strings.Contains(l, `"level":"DEBUG"`) {
			t.Errorf("line %s: want level DEBUG", l)
		}
	}
}

// TestTextLogsDurationStrings: the text format writes durations as Go
// durations too.
func TestTextLogsDurationStrings(t *testing.T) {
	var buf bytes.Buffer
	log := NewLogger(&Config{LogFormat: "text", LogLevel: "info"}, &buf)
	defer klog.ClearLogger()
	log.Info("starting", "leaseDuration", 15*time.Second)
	if !strings.Contains(buf.String(), "leaseDuration=15s") {
		t.Errorf("text line %q lacks leaseDuration=15s", buf.String())
	}
}
