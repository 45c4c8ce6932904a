package main

import (
	"bytes"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/elector-sidecar/elector-sidecar/test/framework/dbserver"
)

func TestParseArgs(t *testing.T) {
	tests := []struct {
		args    []string
		kind    dbserver.Kind
		dir     string
		command []string
		wantErr string
	}{
		{args: []string{"postgres"}, kind: dbserver.KindPostgres},
		{args: []string{"--dir", "/d", "redis", "--", "env", "-0"}, kind: dbserver.KindRedis, dir: "/d", command: []string{"env", "-0"}},
		{args: nil, wantErr: "name a database"},
		{args: []string{"mysql"}, wantErr: `unknown database "mysql"`},
		{args: []string{"redis", "env"}, wantErr: "expected -- CMD ARGS"},
		{args: []string{"redis", "--"}, wantErr: "expected -- CMD ARGS"},
		{args: []string{"--port", "1", "redis"}, wantErr: "flag provided but not defined: -port"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			kind, o, command, err := parseArgs(tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want an error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || kind != tt.kind || o.Dir != tt.dir || !reflect.DeepEqual(command, tt.command) {
				t.Fatalf("got %q %+v %q %v", kind, o, command, err)
			}
		})
	}
}

func TestBadUsageExits2WithAOneLineReason(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"mongodb"}, &stdout, &stderr); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	if !strings.HasPrefix(stderr.String(), `testdb: unknown database "mongodb"`) || stdout.Len() != 0 {
		t.Fatalf("stdout %q, stderr %q", stdout.String(), stderr.String())
	}
}

// A real redis-server for the command's lifetime: the command sees the URL,
// its exit code is testdb's, and the server is gone afterwards.
func TestRunsTheCommandWithTheURLAndTearsDown(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run([]string{"--dir", dir, "redis", "--", "sh", "-c", `redis-cli -u "$ELECTOR_REDIS_URL" PING && exit 3`}, &stdout, &stderr)
	if code != 3 {
		t.Fatalf("exit %d, want the command's 3; stderr:\n%s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "redis://127.0.0.1:") || lines[1] != "PONG" {
		t.Fatalf("stdout %q, want the URL, then PONG", stdout.String())
	}
	b, err := os.ReadFile(dir + "/redis.log")
	if err != nil || !strings.Contains(string(b), "ready to exit") {
		t.Fatalf("redis log does not show a clean shutdown (%v):\n%s", err, b)
	}
}
