// Command testdb starts a throwaway database server (test/framework/dbserver)
// and prints its URL; hack/testdb.sh runs it.
//
//	testdb [--dir DIR] postgres|redis                 print the URL, serve until Ctrl-C / SIGTERM
//	testdb [--dir DIR] postgres|redis -- CMD ARGS...  run CMD with ELECTOR_POSTGRES_URL or ELECTOR_REDIS_URL set
//
// The server is torn down when CMD exits, on Ctrl-C and on SIGTERM. With CMD,
// testdb exits with CMD's exit code; a bad command line exits 2.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/elector-sidecar/elector-sidecar/test/framework/dbserver"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

const usage = "usage: testdb [--dir DIR] postgres|redis [-- CMD ARGS...]"

// parseArgs splits the command line into the server's kind, options and
// the command to run ("" kind: bad usage, said in the error).
func parseArgs(args []string) (dbserver.Kind, dbserver.Options, []string, error) {
	fs := flag.NewFlagSet("testdb", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o dbserver.Options
	fs.StringVar(&o.Dir, "dir", "", "keep the server's files (data, log) here instead of a temporary directory")
	if err := fs.Parse(args); err != nil {
		return "", o, nil, err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return "", o, nil, errors.New("name a database: postgres or redis")
	}
	kind := dbserver.Kind(rest[0])
	if kind != dbserver.KindPostgres && kind != dbserver.KindRedis {
		return "", o, nil, fmt.Errorf("unknown database %q: want postgres or redis", rest[0])
	}
	rest = rest[1:]
	if len(rest) == 0 {
		return kind, o, nil, nil
	}
	if rest[0] != "--" || len(rest) == 1 {
		return "", o, nil, fmt.Errorf("after the database, expected -- CMD ARGS..., got %q", rest)
	}
	return kind, o, rest[1:], nil
}

func run(args []string, stdout, stderr io.Writer) int {
	kind, opts, command, err := parseArgs(args)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "testdb: %v\n%s\n", err, usage)
		return 2
	}
	// Ctrl-C and SIGTERM cancel ctx: the start stops, CMD gets SIGTERM, the server is torn down.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := dbserver.Start(ctx, kind, opts)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "testdb: %v\n", err)
		return 1
	}
	defer func() {
		if err := srv.Stop(); err != nil {
			_, _ = fmt.Fprintf(stderr, "testdb: %v\n", err)
		}
	}()
	env := dbserver.EnvVar(kind)
	_, _ = fmt.Fprintln(stdout, srv.URL)
	if len(command) == 0 {
		fmt.Fprintf(stderr, "testdb: %s ready at %s (data: %s, log: %s); Ctrl-C stops it\n  export %s='%s'\n", kind, srv.URL, srv.Dir, srv.LogPath, env, srv.URL)
		<-ctx.Done()
		fmt.Fprintf(stderr, "testdb: stopping %s\n", kind)
		return 0
	}
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Env = append(os.Environ(), env+"="+srv.URL)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "testdb: %v\n", err)
		return 127
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		// A terminal's Ctrl-C reached CMD too (same process group); SIGTERM
		// covers a signal sent to testdb alone. Then it gets 10 s.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err = <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			err = <-done
		}
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if code := ee.ExitCode(); code >= 0 {
			return code
		}
		return 1 // killed by a signal
	default:
		fmt.Fprintf(stderr, "testdb: %v\n", err)
		return 1
	}
}
