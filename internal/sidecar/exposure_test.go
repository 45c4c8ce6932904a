package sidecar

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestNonLoopbackHTTPAddressLogsAWarning(t *testing.T) {
	for addr, wantWarning := range map[string]bool{
		"127.0.0.1:4040":  false,
		"127.0.0.2:4040":  false,
		"[::1]:4040":      false,
		"localhost:4040":  false,
		":4040":           true,
		"0.0.0.0:4040":    true,
		"[::]:4040":       true,
		"10.1.2.3:4040":   true,
		"[fd00::7]:4040":  true,
		"192.0.2.10:http": true,
	} {
		var buf bytes.Buffer
		warnIfExposed(slog.New(slog.NewTextHandler(&buf, nil)), addr)
		out := buf.String()
		if !wantWarning {
			if out != "" {
				t.Errorf("%s: logged %q, want nothing", addr, out)
			}
			continue
		}
		for _, want := range []string{"level=WARN", "read the fencing token", "release the Lease", "httpAddress=" + addr} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: log %q lacks %q", addr, out, want)
			}
		}
	}
}
