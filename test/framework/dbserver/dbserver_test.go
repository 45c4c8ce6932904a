package dbserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
)

func TestCommandLinesAndURLs(t *testing.T) {
	tests := []struct {
		name string
		got  []string
		want []string
	}{
		{"initdb: superuser elector, trust auth, no fsync", initdbArgs("/d/data"),
			[]string{"-D", "/d/data", "-U", "elector", "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions"}},
		{"postgres: loopback only, socket in the temp dir, fsync off", postgresArgs("/d/data", "/d/run", 5433),
			[]string{"-D", "/d/data", "-p", "5433", "-k", "/d/run", "-c", "listen_addresses=127.0.0.1",
				"-c", "fsync=off", "-c", "full_page_writes=off",
				"-c", "max_connections=200", "-c", "log_min_messages=warning", "-c", "log_min_error_statement=panic"}},
		{"redis: loopback, no RDB snapshots, append-only so a restart keeps the data", redisArgs("/d", 6380),
			[]string{"--port", "6380", "--bind", "127.0.0.1", "--dir", "/d", "--save", "", "--appendonly", "yes",
				"--appendfsync", "always", "--daemonize", "no", "--maxmemory-policy", "noeviction"}},
		{"URLs", []string{PostgresURL(5433), RedisURL(6380), EnvVar(KindPostgres), EnvVar(KindRedis)},
			[]string{"postgres://elector@127.0.0.1:5433/postgres?sslmode=disable", "redis://127.0.0.1:6380/0", "ELECTOR_POSTGRES_URL", "ELECTOR_REDIS_URL"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !reflect.DeepEqual(tt.got, tt.want) {
				t.Fatalf("got  %q\nwant %q", tt.got, tt.want)
			}
		})
	}
}

func TestNewestPostgresBinDirPicksTheHighestVersionWithServerBinaries(t *testing.T) {
	root := t.TempDir()
	mk := func(ver string, bins ...string) string {
		d := filepath.Join(root, ver, "bin")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, b := range bins {
			if err := os.WriteFile(filepath.Join(d, b), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	v9 := mk("9", "initdb", "postgres")
	v15 := mk("15", "initdb", "postgres")
	v17 := mk("17", "psql") // client only: not a server
	if got := newestPostgresBinDir([]string{v9, v17, v15}); got != v15 {
		t.Fatalf("got %q, want %q", got, v15)
	}
	if got := newestPostgresBinDir([]string{v17}); got != "" {
		t.Fatalf("client-only dir: got %q, want none", got)
	}
	t.Setenv("ELECTOR_POSTGRES_BIN_DIR", v17)
	if _, err := PostgresBinDir(); !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("ELECTOR_POSTGRES_BIN_DIR without the server: got %v, want ErrNotInstalled", err)
	}
	t.Setenv("ELECTOR_POSTGRES_BIN_DIR", v9)
	if got, err := PostgresBinDir(); err != nil || got != v9 {
		t.Fatalf("ELECTOR_POSTGRES_BIN_DIR: got %q, %v, want %q", got, err, v9)
	}
}

// Both servers for real: they answer, Restart keeps port and data, Stop
// removes the temporary directories. As root, PostgreSQL runs as nobody.
func TestServersAnswerAndKeepDataAcrossRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("postgres", func(t *testing.T) {
		s := Postgres(t)
		exec := func(sql string, dst ...any) {
			t.Helper()
			conn, err := pgx.Connect(ctx, s.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = conn.Close(ctx) }()
			if len(dst) == 0 {
				_, err = conn.Exec(ctx, sql)
			} else {
				err = conn.QueryRow(ctx, sql).Scan(dst...)
			}
			if err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
		var user string
		exec("SELECT current_user", &user)
		if user != PostgresUser {
			t.Fatalf("connected as %q, want %q", user, PostgresUser)
		}
		exec("CREATE TABLE kept (v text); INSERT INTO kept VALUES ('before restart')")
		if os.Geteuid() == 0 {
			status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.Pid()))
			if err != nil {
				t.Fatal(err)
			}
			if m := regexp.MustCompile(`(?m)^Uid:\s+(\d+)`).FindSubmatch(status); m == nil || string(m[1]) == "0" {
				t.Fatalf("postgres runs as root (status Uid: %q)", m)
			}
		}
		pid := s.Pid()
		if err := s.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		if s.Pid() == pid {
			t.Fatalf("Restart kept pid %d", pid)
		}
		var v string
		exec("SELECT v FROM kept", &v)
		if v != "before restart" {
			t.Fatalf("after restart: %q", v)
		}
		dataDir := filepath.Dir(s.dataDir)
		if err := s.Stop(); err != nil {
			t.Fatal(err)
		}
		if s.Running() {
			t.Fatal("running after Stop")
		}
		for _, d := range []string{s.Dir, dataDir} {
			if _, err := os.Stat(d); !os.IsNotExist(err) {
				t.Fatalf("%s left behind after Stop (%v)", d, err)
			}
		}
	})

	t.Run("redis", func(t *testing.T) {
		s := Redis(t)
		c := goredis.NewClient(&goredis.Options{Addr: s.Addr})
		defer func() { _ = c.Close() }()
		if err := c.Set(ctx, "kept", "before restart", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		if v, err := c.Get(ctx, "kept").Result(); err != nil || v != "before restart" {
			t.Fatalf("after restart: %q, %v", v, err)
		}
		if err := s.Stop(); err != nil {
			t.Fatal(err)
		}
		if s.Running() {
			t.Fatal("running after Stop")
		}
		if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
			t.Fatalf("%s left behind after Stop (%v)", s.Dir, err)
		}
	})
}
