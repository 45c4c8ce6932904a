package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/elector-sidecar/elector-sidecar/pkg/client"
	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
	"github.com/elector-sidecar/elector-sidecar/pkg/fencing/configmapstore"
	"github.com/elector-sidecar/elector-sidecar/pkg/fencing/httpstore"
)

// Exit codes.
const (
	exitOK      = 0
	exitRuntime = 1
	exitUsage   = 2
)

// env abstracts the process environment for tests.
type env struct {
	getenv   func(string) string
	hostname func() (string, error)
}

func osEnv() env { return env{getenv: os.Getenv, hostname: os.Hostname} }

type writerConfig struct {
	sidecar  string
	store    string
	interval time.Duration
	writer   string
	// healthListen, if set, serves the demo's health endpoint (health.go).
	healthListen string
}

type storeConfig struct {
	listen string
}

// usageError is a bad flag: exit 2 with one line.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

// run is main without the process: it returns the exit code.
func run(ctx context.Context, args []string, e env, late <-chan os.Signal, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "health" {
		return runHealthCommand(ctx, args[1:], e, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "store" {
		cfg, err := parseStore(args[1:], e, stderr)
		if err != nil {
			return reportParse(err, stderr)
		}
		if err := runStore(ctx, cfg, stdout); err != nil {
			fmt.Fprintf(stderr, "elector-demo store: %v\n", err)
			return exitRuntime
		}
		return exitOK
	}
	cfg, err := parseWriter(args, e, stderr)
	if err != nil {
		return reportParse(err, stderr)
	}
	if err := runWriter(ctx, cfg, e, late, stdout); err != nil {
		fmt.Fprintf(stderr, "elector-demo: %v\n", err)
		return exitRuntime
	}
	return exitOK
}

func reportParse(err error, stderr io.Writer) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	fmt.Fprintf(stderr, "elector-demo: %v\n", err)
	return exitUsage
}

// newFlagSet returns a flag set that prints usage only for -h, so a bad flag
// is one line on stderr.
func newFlagSet(name string, stderr io.Writer) (*flag.FlagSet, func()) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {} // the flag package calls it on every error
	help := func() {
		fs.SetOutput(stderr)
		fmt.Fprintf(stderr, "Usage of %s:\n", name)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs, help
}

// parseFlags applies environment variables (flag name -> variable), then args.
func parseFlags(fs *flag.FlagSet, help func(), args []string, envVars map[string]string, e env) error {
	for name, ev := range envVars {
		if v := e.getenv(ev); v != "" {
			if err := fs.Set(name, v); err != nil {
				return usagef("invalid value %q for %s (--%s)", v, ev, name)
			}
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			help()
			return err
		}
		return usagef("%v", err)
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

func parseWriter(args []string, e env, stderr io.Writer) (*writerConfig, error) {
	c := &writerConfig{}
	fs, help := newFlagSet("elector-demo", stderr)
	fs.StringVar(&c.sidecar, "sidecar", "http://127.0.0.1:4040", "elector-sidecar local API (env ELECTOR_DEMO_SIDECAR)")
	fs.StringVar(&c.store, "store", "", "where to write: configmap:<namespace>/<name>, kubeobject:<namespace>/<name> (a ConfigMap fenced by the API server), or http://host:port of an elector-demo store (env ELECTOR_DEMO_STORE, required)")
	fs.DurationVar(&c.interval, "interval", 500*time.Millisecond, "pause between attempts (env ELECTOR_DEMO_INTERVAL)")
	fs.StringVar(&c.writer, "writer", "", "name written with each value (env ELECTOR_DEMO_WRITER; default $POD_NAME, then the hostname)")
	fs.StringVar(&c.healthListen, "health-listen", "", "serve GET /healthz and POST /health?fail=true|false here, e.g. 127.0.0.1:8080 (env ELECTOR_DEMO_HEALTH_LISTEN; default off)")
	err := parseFlags(fs, help, args, map[string]string{
		"sidecar":       "ELECTOR_DEMO_SIDECAR",
		"store":         "ELECTOR_DEMO_STORE",
		"interval":      "ELECTOR_DEMO_INTERVAL",
		"writer":        "ELECTOR_DEMO_WRITER",
		"health-listen": "ELECTOR_DEMO_HEALTH_LISTEN",
	}, e)
	if err != nil {
		return nil, err
	}
	if c.writer == "" {
		c.writer = e.getenv("POD_NAME")
	}
	if c.writer == "" && e.hostname != nil {
		c.writer, _ = e.hostname()
	}
	switch {
	case c.writer == "":
		return nil, usagef("--writer is empty and neither POD_NAME nor the hostname is available")
	case c.interval <= 0:
		return nil, usagef("--interval %v: must be positive", c.interval)
	case c.store == "":
		return nil, usagef("--store is required: configmap:<namespace>/<name>, kubeobject:<namespace>/<name> or http://host:port")
	}
	if u, err := url.Parse(c.sidecar); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usagef("--sidecar %q: want a URL like http://127.0.0.1:4040", c.sidecar)
	}
	c.sidecar = strings.TrimRight(c.sidecar, "/")
	if _, _, _, err := parseStoreSpec(c.store); err != nil {
		return nil, err
	}
	if c.healthListen != "" {
		if _, _, err := net.SplitHostPort(c.healthListen); err != nil {
			return nil, usagef("--health-listen %q: want host:port", c.healthListen)
		}
	}
	return c, nil
}

// parseStoreSpec splits --store into ("configmap", namespace, name) or ("http", url, "").
func parseStoreSpec(s string) (kind, a, b string, err error) {
	switch {
	case strings.HasPrefix(s, "configmap:") || strings.HasPrefix(s, "kubeobject:"):
		kind, rest, _ := strings.Cut(s, ":")
		ns, name, ok := strings.Cut(rest, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return "", "", "", usagef("--store %q: want %s:<namespace>/<name>", s, kind)
		}
		return kind, ns, name, nil
	case strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "https://"):
		u, err := url.Parse(s)
		if err != nil || u.Host == "" {
			return "", "", "", usagef("--store %q: want http://host:port", s)
		}
		return "http", strings.TrimRight(s, "/"), "", nil
	default:
		return "", "", "", usagef("--store %q: want configmap:<namespace>/<name>, kubeobject:<namespace>/<name> or http://host:port", s)
	}
}

func parseStore(args []string, e env, stderr io.Writer) (*storeConfig, error) {
	c := &storeConfig{}
	fs, help := newFlagSet("elector-demo store", stderr)
	fs.StringVar(&c.listen, "listen", "127.0.0.1:7070", "address of the fenced HTTP store (env ELECTOR_DEMO_STORE_LISTEN)")
	if err := parseFlags(fs, help, args, map[string]string{"listen": "ELECTOR_DEMO_STORE_LISTEN"}, e); err != nil {
		return nil, err
	}
	if _, _, err := net.SplitHostPort(c.listen); err != nil {
		return nil, usagef("--listen %q: want host:port", c.listen)
	}
	return c, nil
}

// fencedWriter writes a value with a token and its Lease UID: nil if
// accepted, an error matching fencing.ErrStaleToken if the resource rejected
// the token (*fencing.Fence and *httpstore.Client).
type fencedWriter interface {
	WriteToken(ctx context.Context, token fencing.Token, value []byte) error
}

func newStore(spec, writer string) (fencedWriter, error) {
	kind, a, b, err := parseStoreSpec(spec)
	if err != nil {
		return nil, err
	}
	if kind == "http" {
		return httpstore.NewClient(a, writer), nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules() // $KUBECONFIG, ~/.kube/config, else in-cluster
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config for %s: %w", spec, err)
	}
	if kind == "kubeobject" {
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("kubernetes client for %s: %w", spec, err)
		}
		return newKubeObjectStore(dyn, a, b, writer), nil
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client for %s: %w", spec, err)
	}
	return fencing.New(configmapstore.New(cs.CoreV1(), a, b)), nil
}

// writer is the loop's state.
type writer struct {
	cfg     *writerConfig
	store   fencedWriter
	sidecar *client.Client
	out     io.Writer
	mu      sync.Mutex // serialises log lines
	attempt int
	last    fencing.Token // the last token the sidecar gave us, with its Lease UID (Value 0: none)
}

func runWriter(ctx context.Context, cfg *writerConfig, e env, late <-chan os.Signal, out io.Writer) error {
	store, err := newStore(cfg.store, cfg.writer)
	if err != nil {
		return err
	}
	sidecar, err := client.New(cfg.sidecar, client.WithTimeout(2*time.Second))
	if err != nil {
		return err
	}
	w := &writer{cfg: cfg, store: store, sidecar: sidecar, out: out}
	w.logf("result=starting sidecar=%s store=%s interval=%v", cfg.sidecar, cfg.store, cfg.interval)
	if cfg.healthListen != "" {
		stop, err := serveHealth(cfg.healthListen, w.logf)
		if err != nil {
			return err
		}
		defer stop()
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			w.logf("result=stopped")
			return nil
		case <-late:
			w.lateWrite(ctx)
		case <-t.C:
			w.once(ctx)
			t.Reset(cfg.interval)
		}
	}
}

func (w *writer) logf(format string, a ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fmt.Fprintf(w.out, "time=%s writer=%s attempt=%d %s\n", time.Now().Format("15:04:05.000"), w.cfg.writer, w.attempt, fmt.Sprintf(format, a...))
}

// once is one attempt: ask the sidecar for a token, then write with it.
func (w *writer) once(ctx context.Context) {
	w.attempt++
	reqCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	tr, err := w.sidecar.Token(reqCtx)
	var se *client.StatusError
	switch {
	case errors.As(err, &se): // 409 (another pod leads, or nobody), 503 (not ready, term not provably safe)
		w.logf("result=not-leader status=%d holder=%s reason=%q", se.StatusCode, orDash(se.Holder), se.Message)
		return
	case err != nil:
		if ctx.Err() == nil {
			w.logf("result=sidecar-error err=%q", err.Error())
		}
		return
	}
	w.mu.Lock()
	w.last = tr.Fencing()
	w.mu.Unlock()
	w.write(reqCtx, tr.Fencing(), "")
}

// lateWrite writes with the last token we were given, without asking.
func (w *writer) lateWrite(ctx context.Context) {
	w.mu.Lock()
	tok := w.last
	w.mu.Unlock()
	if tok.Value == 0 {
		w.logf("result=late-write-skipped reason=%q", "this writer was never given a token")
		return
	}
	reqCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	w.write(reqCtx, tok, " late=true")
}

func (w *writer) write(ctx context.Context, tok fencing.Token, extra string) {
	token := tok.Value
	value := fmt.Sprintf("%s #%d token %d", w.cfg.writer, w.attempt, token)
	err := w.store.WriteToken(ctx, tok, []byte(value))
	var ste *fencing.StaleTokenError
	switch {
	case err == nil:
		w.logf("result=accepted token=%d highest=%d value=%q%s", token, token, value, extra)
	case errors.As(err, &ste) && ste.SameValueOtherLease():
		w.logf("result=rejected-stale token=%d highest=%d leaseUID=%s highestLeaseUID=%s%s", token, ste.Highest, ste.LeaseUID, ste.HighestLeaseUID, extra)
	case errors.As(err, &ste):
		w.logf("result=rejected-stale token=%d highest=%d%s%s", token, ste.Highest, apiMessage(err), extra)
	case errors.Is(err, fencing.ErrStaleToken):
		w.logf("result=rejected-stale token=%d%s", token, extra)
	default:
		w.logf("result=store-error token=%d err=%q%s", token, err.Error(), extra)
	}
}

// apiMessage: ` apiserver="<message>"` when err carries the API server's answer (the kubeobject store's
// rejections: the fence policy's own words), else "".
func apiMessage(err error) string {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return ""
	}
	return fmt.Sprintf(" apiserver=%q", status.Status().Message)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// runStore serves a fenced HTTP store until ctx ends, logging every write.
func runStore(ctx context.Context, cfg *storeConfig, out io.Writer) error {
	srv := httpstore.NewServer(fencing.NewMemory())
	srv.KeepLog(false)
	var mu sync.Mutex
	srv.OnWrite = func(w httpstore.Write) {
		mu.Lock()
		defer mu.Unlock()
		result := "accepted"
		switch {
		case w.Stale:
			result = "rejected-stale"
		case !w.Accepted:
			result = "error"
		}
		fmt.Fprintf(out, "time=%s store writer=%s result=%s token=%d highest=%d value=%q\n",
			w.At.Format("15:04:05.000"), orDash(w.Writer), result, w.Token, w.Highest, w.Value)
	}
	l, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.listen, err)
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(l) }()
	fmt.Fprintf(out, "time=%s store result=listening address=%s\n", time.Now().Format("15:04:05.000"), l.Addr())
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
		fmt.Fprintf(out, "time=%s store result=stopped\n", time.Now().Format("15:04:05.000"))
		return nil
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", cfg.listen, err)
	}
}
