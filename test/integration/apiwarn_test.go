package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// apiWarning is one "API server request failed" line of a JSON log.
type apiWarning struct {
	Time       time.Time `json:"time"`
	Level      string    `json:"level"`
	Verb       string    `json:"verb"`
	Err        string    `json:"err"`
	Suppressed int       `json:"suppressed"`
	Interval   string    `json:"interval"`
}

// jsonLogLines parses every JSON line of a process log (other lines are
// skipped), failing the test on a line that carries a key twice.
func jsonLogLines(t *testing.T, logs string) []map[string]json.RawMessage {
	t.Helper()
	var out []map[string]json.RawMessage
	for _, line := range strings.Split(logs, "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			continue // a line still being written
		}
		if n := strings.Count(line, `"logger":`); n > 1 {
			t.Errorf("log line carries \"logger\" %d times: %s", n, line)
		}
		out = append(out, m)
	}
	return out
}

// TestUnreachableAPIServerIsLoggedThrottled: with the API server refusing
// connections the sidecar warns at once (at --log-level=info), then at most
// once per interval (its lease duration) with the count of the failures it
// did not log; its JSON lines carry "logger" once and durations as strings.
func TestUnreachableAPIServerIsLoggedThrottled(t *testing.T) {
	refused, err := framework.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.LoadFromFile(env.cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://" + refused
	}
	kc := filepath.Join(t.TempDir(), "refused.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kc); err != nil {
		t.Fatal(err)
	}
	g := newGroup(t, testTimings)
	g.Template.Kubeconfig = kc
	g.Template.ExtraArgs = []string{"--log-format=json", "--log-level=info"}
	c := g.start("lonely")[0]

	warnings := func() []apiWarning {
		var out []apiWarning
		for _, m := range jsonLogLines(t, c.Logs()) {
			if string(m["msg"]) != `"API server request failed"` {
				continue
			}
			b, _ := json.Marshal(m)
			var w apiWarning
			if err := json.Unmarshal(b, &w); err != nil {
				t.Fatalf("warning line %s: %v", b, err)
			}
			out = append(out, w)
		}
		return out
	}
	// At once: the first list fails right after the start.
	err = framework.Eventually(g.ctx, 100*time.Millisecond, 10*time.Second, "a first warning about the refused API server", func(context.Context) error {
		if len(warnings()) == 0 {
			return fmt.Errorf("no warning yet; log tail:\n%s", c.LogTail(5))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	first := warnings()[0]
	if first.Level != "WARN" || first.Suppressed != 0 || !strings.Contains(first.Err, "connection refused") || (first.Verb != "list" && first.Verb != "watch") {
		t.Fatalf("first warning %+v: want WARN, a list or watch verb, connection refused, suppressed 0", first)
	}
	if want := testTimings.LeaseDuration.String(); first.Interval != want {
		t.Errorf("warning interval %q, want the lease duration as a string %q", first.Interval, want)
	}
	// Later: a warning that stands for failures that were not logged.
	var later apiWarning
	err = framework.Eventually(g.ctx, 200*time.Millisecond, 90*time.Second, "a later warning with a suppressed count", func(context.Context) error {
		for _, w := range warnings()[1:] {
			if w.Suppressed > 0 {
				later = w
				return nil
			}
		}
		return fmt.Errorf("warnings so far: %+v", warnings())
	})
	if err != nil {
		t.Fatal(err)
	}
	ws := warnings()
	for i := 1; i < len(ws); i++ {
		if gap := ws[i].Time.Sub(ws[i-1].Time); gap < testTimings.LeaseDuration {
			t.Errorf("warnings %d and %d only %v apart, want at least the interval %v: %+v", i-1, i, gap, testTimings.LeaseDuration, ws)
		}
	}
	t.Logf("first warning %+v; later %+v; %d warnings in all", first, later, len(ws))
	for _, m := range jsonLogLines(t, c.Logs()) {
		if string(m["msg"]) == `"starting"` && string(m["leaseDuration"]) != `"`+testTimings.LeaseDuration.String()+`"` {
			t.Errorf("starting line's leaseDuration %s, want %q", m["leaseDuration"], testTimings.LeaseDuration.String())
		}
	}
}
