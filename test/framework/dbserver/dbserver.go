// Package dbserver starts throwaway database servers for tests, the chaos
// soak, the benchmarks and hack/testdb.sh: a real PostgreSQL (initdb +
// postgres) or a real redis-server on a free loopback port, with its data in
// a temporary directory, waited on until it answers, and torn down by Stop.
//
// The binaries come from the Debian packages postgresql and redis-server
// (hack/install-deps.sh installs them when missing). PostgreSQL's server
// binaries are not on PATH on Debian: they are looked up in
// $ELECTOR_POSTGRES_BIN_DIR, then the newest /usr/lib/postgresql/<ver>/bin,
// then PATH.
//
// PostgreSQL: one cluster made by initdb with the superuser "elector" and
// trust authentication (loopback only), listening on 127.0.0.1:PORT, its unix
// socket inside the data's temporary directory, fsync off (synchronous_commit
// stays on: a killed server keeps every commit it acknowledged). Connect to the
// database "postgres":
//
//	postgres://elector@127.0.0.1:PORT/postgres?sslmode=disable
//
// PostgreSQL refuses to run as root: when this process runs as root, initdb
// and postgres run as the user "nobody" (ELECTOR_POSTGRES_USER overrides),
// with the data in a directory of its own under os.TempDir() owned by that
// user.
//
// Redis: redis-server --port PORT --bind 127.0.0.1 --save ” --appendonly
// yes --appendfsync always, so Restart keeps the data:
//
//	redis://127.0.0.1:PORT/0
//
// Every server gets SIGKILL if this process dies (Linux parent-death signal),
// and runs in its own process group, so a terminal's Ctrl-C reaches only this
// process, which then stops the server itself.
package dbserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
)

// Kind names a database.
type Kind string

// The kinds of server.
const (
	KindPostgres Kind = "postgres"
	KindRedis    Kind = "redis"
)

// PostgresUser and PostgresDatabase are what the PostgreSQL URL names: the
// cluster's superuser (trust authentication) and the database initdb creates.
const (
	PostgresUser     = "elector"
	PostgresDatabase = "postgres"
)

// ErrNotInstalled is returned when a server's binaries are missing.
var ErrNotInstalled = errors.New("database server not installed (run hack/install-deps.sh)")

// DefaultStartTimeout bounds how long a start waits for the server to answer
// when the context has no deadline.
const DefaultStartTimeout = 60 * time.Second

// Options configure a server.
type Options struct {
	// Dir keeps the server's files (data, log). Empty: a new temporary
	// directory, removed by Stop. A directory given here is created if
	// missing and left in place. When PostgreSQL runs as another user (this
	// process is root), its data lives in a temporary directory of its own,
	// owned by that user and removed by Stop; the log stays in Dir.
	Dir string
	// Port to listen on, on 127.0.0.1. 0: a free port.
	Port int
	// Output, if set, also receives the server's log.
	Output io.Writer
}

// Server is a running (or stopped) throwaway database server.
type Server struct {
	Kind Kind
	// Addr is 127.0.0.1:PORT.
	Addr string
	// URL is the connection URL (see the package doc).
	URL string
	// Dir holds the server's files (Options.Dir or a temporary directory).
	Dir string
	// LogPath is the server's log (stdout and stderr, appended across restarts).
	LogPath string

	port     int
	output   io.Writer
	ownDir   bool   // Stop removes Dir
	dataDir  string // postgres: the cluster; redis: Dir
	ownData  bool   // Stop removes dataDir
	binDir   string // postgres
	redisBin string
	cred     *syscall.Credential // postgres as root: run as this user

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	stopped bool
}

// StartPostgres initialises a PostgreSQL cluster and starts it.
func StartPostgres(ctx context.Context, o Options) (*Server, error) {
	binDir, err := PostgresBinDir()
	if err != nil {
		return nil, err
	}
	s, err := newServer(KindPostgres, o)
	if err != nil {
		return nil, err
	}
	s.binDir = binDir
	s.URL = PostgresURL(s.port)
	if err := s.initPostgres(ctx); err != nil {
		s.cleanup()
		return nil, err
	}
	if err := s.start(ctx); err != nil {
		s.cleanup()
		return nil, err
	}
	return s, nil
}

// StartRedis starts a redis-server.
func StartRedis(ctx context.Context, o Options) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server: %w: %v", ErrNotInstalled, err)
	}
	s, err := newServer(KindRedis, o)
	if err != nil {
		return nil, err
	}
	s.redisBin = bin
	s.dataDir = s.Dir
	s.URL = RedisURL(s.port)
	if err := s.start(ctx); err != nil {
		s.cleanup()
		return nil, err
	}
	return s, nil
}

func newServer(kind Kind, o Options) (*Server, error) {
	s := &Server{Kind: kind, port: o.Port, output: o.Output, Dir: o.Dir}
	if s.port == 0 {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		s.port = p
	}
	s.Addr = "127.0.0.1:" + strconv.Itoa(s.port)
	if s.Dir == "" {
		d, err := os.MkdirTemp("", "elector-"+string(kind)+"-")
		if err != nil {
			return nil, fmt.Errorf("start %s: %w", kind, err)
		}
		s.Dir, s.ownDir = d, true
	} else if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("start %s: %w", kind, err)
	}
	abs, err := filepath.Abs(s.Dir)
	if err != nil {
		return nil, err
	}
	s.Dir = abs
	s.LogPath = filepath.Join(s.Dir, string(kind)+".log")
	return s, nil
}

// PostgresURL is the URL of a server started here on port.
func PostgresURL(port int) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", PostgresUser, port, PostgresDatabase)
}

// RedisURL is the URL of a server started here on port.
func RedisURL(port int) string { return fmt.Sprintf("redis://127.0.0.1:%d/0", port) }

// PostgresBinDir finds the directory with initdb and postgres:
// $ELECTOR_POSTGRES_BIN_DIR, the newest /usr/lib/postgresql/<ver>/bin, or the
// directory of postgres on PATH.
func PostgresBinDir() (string, error) {
	if d := os.Getenv("ELECTOR_POSTGRES_BIN_DIR"); d != "" {
		if err := hasPostgres(d); err != nil {
			return "", fmt.Errorf("ELECTOR_POSTGRES_BIN_DIR=%s: %w", d, err)
		}
		return d, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	if d := newestPostgresBinDir(matches); d != "" {
		return d, nil
	}
	if p, err := exec.LookPath("postgres"); err == nil {
		if d := filepath.Dir(p); hasPostgres(d) == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("postgresql: %w: no initdb and postgres in /usr/lib/postgresql/*/bin or on PATH", ErrNotInstalled)
}

// newestPostgresBinDir picks, of dirs like /usr/lib/postgresql/<ver>/bin, the
// one with the highest major version that has the server binaries.
func newestPostgresBinDir(dirs []string) string {
	ver := func(d string) int {
		n, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		return n
	}
	sort.SliceStable(dirs, func(i, j int) bool { return ver(dirs[i]) > ver(dirs[j]) })
	for _, d := range dirs {
		if hasPostgres(d) == nil {
			return d
		}
	}
	return ""
}

func hasPostgres(dir string) error {
	for _, b := range []string{"initdb", "postgres"} {
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("%w: no executable %s in %s", ErrNotInstalled, b, dir)
		}
	}
	return nil
}

// initdbArgs renders initdb's command line.
func initdbArgs(dataDir string) []string {
	return []string{"-D", dataDir, "-U", PostgresUser, "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions"}
}

// postgresArgs renders postgres's command line: loopback TCP on port, the unix
// socket in sockDir, fsync off (a throwaway server: nothing survives a machine
// crash) but synchronous_commit on, PostgreSQL's default, so a commit is in
// the kernel before it returns and a killed server (Kill, then Restart) keeps
// every write it acknowledged.
func postgresArgs(dataDir, sockDir string, port int) []string {
	return []string{"-D", dataDir, "-p", strconv.Itoa(port), "-k", sockDir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200", "-c", "log_min_messages=warning", "-c", "log_min_error_statement=panic"}
}

// redisArgs renders redis-server's command line.
func redisArgs(dir string, port int) []string {
	return []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "",
		"--appendonly", "yes", "--appendfsync", "always", "--daemonize", "no", "--maxmemory-policy", "noeviction"}
}

// runAsUser is who runs PostgreSQL: nil (this process's user) unless this
// process is root.
func runAsUser() (*syscall.Credential, string, error) {
	if os.Geteuid() != 0 {
		return nil, "", nil
	}
	name := os.Getenv("ELECTOR_POSTGRES_USER")
	if name == "" {
		name = "nobody"
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, "", fmt.Errorf("postgresql refuses to run as root and user %q (ELECTOR_POSTGRES_USER) is unknown: %w", name, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, "", fmt.Errorf("user %q: %w", name, err)
	}
	if uid == 0 {
		return nil, "", fmt.Errorf("postgresql refuses to run as root: ELECTOR_POSTGRES_USER=%s is root", name)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, name, nil
}

func (s *Server) initPostgres(ctx context.Context) error {
	cred, name, err := runAsUser()
	if err != nil {
		return err
	}
	s.cred = cred
	base := s.Dir
	if cred != nil {
		// The unprivileged user needs a path it can reach; Dir may sit below
		// directories only root can enter (t.TempDir()).
		d, err := os.MkdirTemp("", "elector-postgres-data-")
		if err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
		s.ownData = true
		if err := os.Chown(d, int(cred.Uid), int(cred.Gid)); err != nil {
			_ = os.RemoveAll(d)
			return fmt.Errorf("postgres: chown %s to %s: %w", d, name, err)
		}
		base = d
	}
	s.dataDir = filepath.Join(base, "data")
	if err := os.MkdirAll(s.sockDir(), 0o700); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	if cred != nil {
		if err := os.Chown(s.sockDir(), int(cred.Uid), int(cred.Gid)); err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
	}
	out, err := s.command(ctx, filepath.Join(s.binDir, "initdb"), initdbArgs(s.dataDir)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("postgres: initdb %s (as %s): %w\n%s", s.dataDir, s.userName(name), err, tail(string(out), 20))
	}
	return nil
}

func (s *Server) userName(name string) string {
	if name != "" {
		return name
	}
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return strconv.Itoa(os.Getuid())
}

// sockDir is PostgreSQL's unix socket directory (next to the data, so it is
// short enough and reachable by the server's user).
func (s *Server) sockDir() string { return filepath.Join(filepath.Dir(s.dataDir), "run") }

func (s *Server) command(ctx context.Context, path string, args []string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = filepath.Dir(s.dataDir)
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LANG=C")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true, Credential: s.cred}
	return cmd
}

// start runs the server process and waits until it answers.
func (s *Server) start(ctx context.Context) error {
	var path string
	var args []string
	switch s.Kind {
	case KindPostgres:
		path, args = filepath.Join(s.binDir, "postgres"), postgresArgs(s.dataDir, s.sockDir(), s.port)
	case KindRedis:
		path, args = s.redisBin, redisArgs(s.dataDir, s.port)
	}
	lf, err := os.OpenFile(s.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("start %s: %w", s.Kind, err)
	}
	// The server outlives any one call: only Stop ends it.
	cmd := s.command(context.Background(), path, args)
	var out io.Writer = lf
	if s.output != nil {
		out = io.MultiWriter(lf, s.output)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		_ = lf.Close()
		return fmt.Errorf("start %s (%s): %w", s.Kind, path, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = lf.Close()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done, s.stopped = cmd, done, false
	s.mu.Unlock()
	if err := s.waitReady(ctx, done); err != nil {
		s.kill()
		return err
	}
	return nil
}

// waitReady polls a real connection (PostgreSQL: connect and SELECT 1;
// Redis: PING) until it succeeds, the process exits, or the start times out.
func (s *Server) waitReady(ctx context.Context, done <-chan struct{}) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultStartTimeout)
		defer cancel()
	}
	ping := s.ping
	var last error
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		last = ping(pctx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("%s on %s exited before it answered (%v); log %s:\n%s", s.Kind, s.Addr, last, s.LogPath, s.LogTail(20))
		case <-ctx.Done():
			return fmt.Errorf("%s on %s did not answer: %w (last: %v); log %s:\n%s", s.Kind, s.Addr, ctx.Err(), last, s.LogPath, s.LogTail(20))
		case <-tick.C:
		}
	}
}

// ping checks the server answers a real request.
func (s *Server) ping(ctx context.Context) error {
	switch s.Kind {
	case KindPostgres:
		conn, err := pgx.Connect(ctx, s.URL)
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close(context.Background()) }()
		var one int
		return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
	case KindRedis:
		// Dial first: go-redis logs every failed dial of its pool.
		var d net.Dialer
		nc, err := d.DialContext(ctx, "tcp", s.Addr)
		if err != nil {
			return err
		}
		_ = nc.Close()
		c := goredis.NewClient(&goredis.Options{Addr: s.Addr, MaxRetries: -1})
		defer func() { _ = c.Close() }()
		return c.Ping(ctx).Err()
	}
	return fmt.Errorf("unknown kind %q", s.Kind)
}

// Running reports whether the server process is running.
func (s *Server) Running() bool {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Pid returns the server process's id (0 if not started).
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// stopSignal is a clean, quick shutdown: PostgreSQL's "fast" shutdown
// (SIGINT: roll back open transactions, checkpoint, exit); SIGTERM would
// wait for every client to disconnect. Redis saves and exits on SIGTERM.
func (s *Server) stopSignal() syscall.Signal {
	if s.Kind == KindPostgres {
		return syscall.SIGINT
	}
	return syscall.SIGTERM
}

// shutdown stops the process: the clean signal, then SIGKILL to its process
// group after grace.
func (s *Server) shutdown(grace time.Duration) error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
	}
	_ = cmd.Process.Signal(s.stopSignal())
	select {
	case <-done:
		return nil
	case <-time.After(grace):
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
	return fmt.Errorf("%s on %s did not stop within %v of %v: killed", s.Kind, s.Addr, grace, s.stopSignal())
}

func (s *Server) kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// Kill stops the server with SIGKILL (its whole process group), as a crash
// would; Restart brings it back with the same data (PostgreSQL recovers from
// its WAL; Redis replays its append-only file).
func (s *Server) Kill() { s.kill() }

// Restart stops the server cleanly and starts it again on the same port with
// the same data. Connections break; clients reconnect.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	stopped := s.stopped
	s.mu.Unlock()
	if stopped {
		return fmt.Errorf("restart %s on %s: the server was stopped for good (Stop)", s.Kind, s.Addr)
	}
	if err := s.shutdown(30 * time.Second); err != nil {
		return err
	}
	return s.start(ctx)
}

// Stop stops the server and removes the directories it created. It is safe
// to call more than once.
func (s *Server) Stop() error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil
	}
	s.stopped = true
	s.mu.Unlock()
	err := s.shutdown(15 * time.Second)
	s.cleanup()
	return err
}

func (s *Server) cleanup() {
	if s.ownData && s.dataDir != "" {
		_ = os.RemoveAll(filepath.Dir(s.dataDir))
	}
	if s.ownDir {
		_ = os.RemoveAll(s.Dir)
	}
}

// LogTail returns the last n lines of the server's log.
func (s *Server) LogTail(n int) string {
	b, err := os.ReadFile(s.LogPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", s.LogPath, err)
	}
	return tail(string(b), n)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// EnvVar is the environment variable hack/testdb.sh sets to the URL of a
// server of kind: ELECTOR_POSTGRES_URL or ELECTOR_REDIS_URL.
func EnvVar(kind Kind) string { return "ELECTOR_" + strings.ToUpper(string(kind)) + "_URL" }

// Start starts a server of kind.
func Start(ctx context.Context, kind Kind, o Options) (*Server, error) {
	switch kind {
	case KindPostgres:
		return StartPostgres(ctx, o)
	case KindRedis:
		return StartRedis(ctx, o)
	}
	return nil, fmt.Errorf("unknown database %q: want %s or %s", kind, KindPostgres, KindRedis)
}

// Postgres starts a PostgreSQL for a test and stops it when the test
// ends. A missing binary fails the test (never a skip).
func Postgres(t testing.TB) *Server { return startForTest(t, KindPostgres) }

// Redis starts a redis-server for a test and stops it when the test
// ends. A missing binary fails the test (never a skip).
func Redis(t testing.TB) *Server { return startForTest(t, KindRedis) }

func startForTest(t testing.TB, kind Kind) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), DefaultStartTimeout)
	defer cancel()
	s, err := Start(ctx, kind, Options{})
	if err != nil {
		t.Fatalf("start a throwaway %s: %v", kind, err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop %s: %v", kind, err)
		}
	})
	return s
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}
