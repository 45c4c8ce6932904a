package main

import (
	"strings"
	"testing"
	"time"
)

// TestParseFlagsTakesEnvironmentAndFlags: the environment sets each value,
// a flag wins over it, and a bad value is an error naming the flag.
func TestParseFlagsTakesEnvironmentAndFlags(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://db/x")
	t.Setenv("WORKER_RESOURCE", "")
	t.Setenv("WORKER_INTERVAL", "250ms")
	t.Setenv("POD_NAME", "pod-a")
	cfg, err := parseFlags([]string{"-work", "1s"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.postgres != "postgres://db/x" || cfg.resource != "partition" || cfg.interval != 250*time.Millisecond ||
		cfg.work != time.Second || cfg.holder != "pod-a" || cfg.sidecar != "http://127.0.0.1:4040" {
		t.Fatalf("config %+v", cfg)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-interval", "0s"}, "-interval"},
		{[]string{"-interval", "soon"}, "-interval"},
		{[]string{"-work", "-1s"}, "-work"},
		{[]string{"-resource", ""}, "-resource"},
		{[]string{"-holder", ""}, "-holder"},
		{[]string{"-sidecar", "localhost:4040"}, "-sidecar"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"-postgres", ""}, "no PostgreSQL URL"},
		{[]string{"-nope"}, "-nope"},
	} {
		_, err := parseFlags(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("parseFlags(%q): %v, want one line with %q", tc.args, err, tc.want)
		}
	}
}
