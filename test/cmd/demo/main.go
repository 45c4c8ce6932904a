// Command demo is the elector-sidecar demo (hack/demo.sh, `make demo`): a
// local etcd + kube-apiserver, three "pods" (an elector-sidecar and an
// elector-demo writer each) and one fenced store, with a live timeline of who
// leads, with which token, and which writes the store accepted or rejected.
// It pauses the leader's pod (SIGSTOP, like a long GC pause), shows the
// takeover and the stale write of the paused pod rejected after SIGCONT,
// kills another pod, prints `kubectl get lease -o wide`, and cleans up (also
// on Ctrl-C). After the first election and after the takeover it shows the
// Lease from outside the pods as README.md's "Watching the election" does:
// the real kubectl (`kubectl get lease -o custom-columns=...`) and the
// kubectl-elector plugin through kubectl's plugin discovery (`kubectl
// elector status`), run against the demo's kube-apiserver.
//
// --store=postgres or --store=redis (`make demo STORE=postgres`) puts the
// fence in a throwaway PostgreSQL or redis-server (see store.go) and shows
// the database's own history at the end; the default is an in-memory fence
// in its own process (`elector-demo store`).
//
// It needs the control-plane binaries (KUBEBUILDER_ASSETS or
// hack/build-binaries.sh); hack/demo.sh builds them first.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apifields "k8s.io/apimachinery/pkg/fields"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing/httpstore"
	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

func main() {
	timings := framework.Timings{}
	flag.DurationVar(&timings.LeaseDuration, "lease-duration", 4*time.Second, "sidecars' --lease-duration")
	flag.DurationVar(&timings.RenewDeadline, "renew-deadline", 3*time.Second, "sidecars' --renew-deadline")
	flag.DurationVar(&timings.RetryPeriod, "retry-period", 500*time.Millisecond, "sidecars' --retry-period")
	flag.DurationVar(&timings.ClockSkewMargin, "clock-skew-margin", 300*time.Millisecond, "sidecars' --clock-skew-margin")
	keep := flag.Bool("keep-logs", false, "keep the process logs (printed path) after the demo")
	store := flag.String("store", storeEmbedded, "the fenced store: embedded (in-memory, its own process), postgres or redis (a throwaway server)")
	flag.Parse()
	storeKind, err := parseStoreKind(*store)
	if err != nil || flag.NArg() > 0 {
		if err == nil {
			err = fmt.Errorf("unexpected arguments %q", flag.Args())
		}
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	d := &demo{start: time.Now(), timings: timings, color: isTerminal(os.Stdout), out: os.Stdout, storeKind: storeKind}
	err = d.run(ctx, *keep)
	switch {
	case err == nil:
		d.say("", "demo finished; everything is cleaned up")
	case ctx.Err() != nil:
		d.say("", "interrupted; everything is cleaned up")
		os.Exit(130)
	default:
		fmt.Fprintf(os.Stderr, "demo: FAILED: %v\n", err)
		os.Exit(1)
	}
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0 && os.Getenv("NO_COLOR") == ""
}

// pod is one sidecar + demo writer pair.
type pod struct {
	name    string
	sidecar *framework.Candidate
	app     *framework.Process
}

type demo struct {
	start   time.Time
	timings framework.Timings
	color   bool
	out     io.Writer
	outMu   sync.Mutex

	cp       *framework.ControlPlane
	ns       string
	logDir   string
	bins     map[string]string
	plugin   *pluginBuild
	storeURL string
	store    *framework.Process
	// With a database (--store postgres|redis): the fence in it, and the
	// HTTP store in front of it, served by the driver.
	storeKind  string
	db         *dbStore
	httpStore  *httpstore.Server
	stopHTTP   func()
	rejMu      sync.Mutex
	rejections []rejection

	mu       sync.Mutex
	pods     []*pod
	writers  map[string]*writerState
	leader   string // pod name serving a token ("" none)
	token    int64
	stats    map[string]int // result -> count
	tokens   []int64
	lastLead time.Time
}

// writerState compresses a writer's per-attempt lines for the timeline.
type writerState struct {
	kind     string // last result kind printed
	token    int64
	pending  int // accepted writes not yet printed
	lastShow time.Time
}

const (
	bold   = "\033[1m"
	green  = "\033[32m"
	red    = "\033[31m"
	yellow = "\033[33m"
	cyan   = "\033[36m"
	dim    = "\033[2m"
	reset  = "\033[0m"
)

func (d *demo) paint(c, s string) string {
	if !d.color || c == "" {
		return s
	}
	return c + s + reset
}

// say prints one timeline line.
func (d *demo) say(c, format string, a ...any) {
	d.outMu.Lock()
	defer d.outMu.Unlock()
	ts := fmt.Sprintf("[%5.1fs]", time.Since(d.start).Seconds())
	fmt.Fprintf(d.out, "%s %s\n", d.paint(dim, ts), d.paint(c, fmt.Sprintf(format, a...)))
}

func (d *demo) step(format string, a ...any) {
	if d.writers != nil {
		d.flushAll()
	}
	d.say(bold+yellow, "▶ "+format, a...)
}

func (d *demo) run(ctx context.Context, keepLogs bool) (err error) {
	d.writers = map[string]*writerState{}
	d.stats = map[string]int{}
	d.logDir, err = os.MkdirTemp("", "elector-demo-")
	if err != nil {
		return err
	}
	defer func() {
		if keepLogs || (err != nil && ctx.Err() == nil) {
			d.say(dim, "process logs kept in %s", d.logDir)
		} else {
			_ = os.RemoveAll(d.logDir)
		}
	}()

	if d.storeKind == storeEmbedded {
		d.step("building elector-sidecar, elector-demo and kubectl-elector, starting etcd + kube-apiserver")
	} else {
		d.step("building elector-sidecar, elector-demo and kubectl-elector, starting etcd + kube-apiserver and a throwaway %s", map[string]string{storePostgres: "PostgreSQL", storeRedis: "redis-server"}[d.storeKind])
	}
	// The plugin links slowly (client-go and cli-runtime): it builds while
	// the rest starts; showLease waits for it.
	d.plugin = startPluginBuild(ctx)
	defer d.plugin.cleanup()
	d.bins, err = framework.BuildBinaries(framework.SidecarPackage, framework.DemoPackage)
	if err != nil {
		return err
	}
	defer framework.CleanupBinaries()
	d.cp, err = framework.StartControlPlane(framework.ControlPlaneOptions{Dir: filepath.Join(d.logDir, "controlplane")})
	if err != nil {
		return err
	}
	defer func() {
		d.stopAll()
		if serr := d.cp.Stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	d.say("", "control plane up: kube-apiserver at %s", d.cp.APIServerURL())
	if ctx.Err() != nil {
		return ctx.Err()
	}

	d.ns = "elector-demo"
	if _, err := d.cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: d.ns}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create namespace: %w", err)
	}
	if d.storeKind == storeEmbedded {
		err = d.startStore(ctx)
	} else {
		err = d.startDBStore(ctx) // stopped by stopAll, after the pods
	}
	if err != nil {
		return err
	}
	d.say("", "starting 3 pods in namespace %s, each an elector-sidecar (Lease %s/demo) and an elector-demo writer; all write to one fenced store at %s",
		d.ns, d.ns, d.storeURL)
	d.say(dim, "writers ask their sidecar for /token every 500ms and PUT to the store with it; the store rejects any token lower than the highest it has accepted")
	for _, name := range []string{"pod-a", "pod-b", "pod-c"} {
		if err := d.startPod(ctx, name); err != nil {
			return err
		}
	}

	wctx, stopWatch := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); d.watchLeader(wctx) }()
	go func() { defer wg.Done(); d.flushWrites(wctx) }()
	defer func() { stopWatch(); wg.Wait() }()

	// 1. Steady state, and the Lease as kubectl and the plugin show it.
	first, err := d.waitLeader(ctx, 30*time.Second, "")
	if err != nil {
		return err
	}
	steady := time.Now().Add(4 * time.Second)
	if err := d.showLease(ctx, "the Lease from outside the pods (README \"Watching the election\"): plain kubectl, then the kubectl elector plugin"); err != nil {
		return err
	}
	if err := sleep(ctx, time.Until(steady)); err != nil {
		return err
	}

	// 2. Freeze the leader's whole pod.
	paused := d.pod(first)
	d.step("SIGSTOP %s (its sidecar and its writer): a frozen pod, like a long GC pause or a stalled VM", paused.name)
	d.say(dim, "%s's writer is frozen holding token %d; the other sidecars wait out the lease (%v) from the last renewal they saw", paused.name, d.currentToken(), d.timings.LeaseDuration)
	pausedAt := time.Now()
	_ = paused.app.Pause()
	_ = paused.sidecar.Pause()
	resumed := false
	defer func() {
		if !resumed {
			_ = paused.sidecar.Resume()
			_ = paused.app.Resume()
		}
	}()
	second, err := d.waitLeader(ctx, d.timings.LeaseDuration+15*time.Second, paused.name)
	if err != nil {
		return err
	}
	d.say(bold+green, "  takeover by %s %.1fs after the pause", second, time.Since(pausedAt).Seconds())
	settled := time.Now().Add(3 * time.Second)
	if err := d.showLease(ctx, fmt.Sprintf("the Lease after the takeover: %s holds it with a higher token", second)); err != nil {
		return err
	}
	if err := sleep(ctx, time.Until(settled)); err != nil {
		return err
	}

	// 3. Wake it up: its sidecar refuses tokens, its in-flight write is rejected.
	d.step("SIGCONT %s: it wakes up after %.1fs, still holding its old token", paused.name, time.Since(pausedAt).Seconds())
	_ = paused.sidecar.Resume()
	_ = paused.app.Resume()
	resumed = true
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	r := paused.sidecar.Token(rctx)
	cancel()
	if r.Valid() {
		d.say(bold+red, "  %s's sidecar served token %d after the pause: THIS IS A BUG", paused.name, r.Token)
	} else {
		d.say("", "  %s's sidecar refuses: GET /token -> %d %q (holder %s)", paused.name, r.Status, r.Error, orDash(r.Holder))
	}
	d.say(dim, "  %s's writer now sends the write it had in flight when it froze (SIGUSR1 = late write with its last token)", paused.name)
	_ = paused.app.Signal(syscall.SIGUSR1)
	if err := sleep(ctx, 3*time.Second); err != nil {
		return err
	}

	// 4. Kill another pod.
	victim := d.pod(d.currentLeader())
	if victim == nil || victim == paused {
		for _, p := range d.pods {
			if p != paused {
				victim = p
				break
			}
		}
	}
	d.step("SIGKILL %s (sidecar and writer): a crashed pod that cannot release its Lease", victim.name)
	killedAt := time.Now()
	_ = victim.sidecar.Kill()
	_ = victim.app.Kill()
	third, err := d.waitLeader(ctx, d.timings.LeaseDuration+15*time.Second, victim.name)
	if err != nil {
		return err
	}
	d.say(bold+green, "  takeover by %s %.1fs after the kill", third, time.Since(killedAt).Seconds())
	if err := sleep(ctx, 3*time.Second); err != nil {
		return err
	}
	stopWatch()
	wg.Wait()
	// Stop the writers so the summary is final (the sidecars keep the Lease).
	for _, p := range d.pods {
		p.app.Stop(3 * time.Second)
	}
	d.flushAll()

	// 5. The Lease as Kubernetes shows it, and a summary.
	d.step("kubectl get lease -n %s -o wide", d.ns)
	out, err := d.cp.Kubectl(ctx, "get", "lease", "-n", d.ns, "-o", "wide")
	if err != nil {
		return err
	}
	_, _ = fmt.Fprint(d.out, indent(out))
	h, v, err := httpstore.NewClient(d.storeURL, "demo").Read(ctx)
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.say(bold, "summary: leaders' tokens %v; writes accepted %d, rejected as stale %d, refused by the sidecar (not leader) %d",
		d.tokens, d.stats["accepted"], d.stats["rejected-stale"], d.stats["not-leader"])
	d.mu.Unlock()
	d.say(bold, "the store holds %q with highest token %d", v, h)
	if d.db != nil {
		if err := d.showHistory(ctx); err != nil {
			return err
		}
	}
	d.step("cleaning up")
	return nil
}

func indent(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		if l != "" {
			b.WriteString("          ")
		}
		b.WriteString(l + "\n")
	}
	return b.String()
}

// kubectlElectorPackage is the kubectl plugin; built as "kubectl-elector",
// the name kubectl looks for on PATH for `kubectl elector`.
const kubectlElectorPackage = "./cmd/kubectl-elector"

// pluginBuild is `go build` of the plugin running in the background into a
// directory of its own (which goes on kubectl's PATH).
type pluginBuild struct {
	dir  string
	done chan struct{}
	path string
	err  error
}

func startPluginBuild(ctx context.Context) *pluginBuild {
	b := &pluginBuild{done: make(chan struct{})}
	go func() {
		defer close(b.done)
		root, err := framework.RepoRoot()
		if err == nil {
			b.dir, err = os.MkdirTemp("", "elector-demo-plugin-")
		}
		if err != nil {
			b.err = fmt.Errorf("building kubectl-elector: %w", err)
			return
		}
		bin := filepath.Join(b.dir, "kubectl-elector")
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, kubectlElectorPackage)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %w\n%s", kubectlElectorPackage, err, strings.TrimSpace(string(out)))
			return
		}
		b.path = bin
	}()
	return b
}

// wait returns the plugin's path once it is built.
func (b *pluginBuild) wait(ctx context.Context) (string, error) {
	select {
	case <-b.done:
		return b.path, b.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// cleanup waits for the build (cancelled with the demo's context) and removes it.
func (b *pluginBuild) cleanup() {
	<-b.done
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
}

// leaseColumns is the custom-columns view of README.md's "Watching the election".
const leaseColumns = "custom-columns=NAME:.metadata.name,HOLDER:.spec.holderIdentity,TOKEN:.spec.leaseTransitions,RENEWED:.spec.renewTime"

// leaseCommands are the commands showLease runs, as a user would type them:
// plain kubectl, then the plugin through kubectl.
func leaseCommands(namespace, lease string) [][]string {
	return [][]string{
		{"kubectl", "get", "lease", lease, "-n", namespace, "-o", leaseColumns},
		{"kubectl", "elector", "status", lease, "-n", namespace},
	}
}

// showLease prints title and leaseCommands with their real output: kubectl
// from the control-plane binaries, with KUBECONFIG set to the demo's admin
// kubeconfig and the plugin's directory first on PATH, so kubectl's own
// plugin discovery finds kubectl-elector. It first waits (briefly) for the
// current leader's "became leader" Event, so the plugin's Events show it.
func (d *demo) showLease(ctx context.Context, title string) error {
	plugin, err := d.plugin.wait(ctx)
	if err != nil {
		return err
	}
	d.waitLeaderEvent(ctx, d.currentLeader(), d.currentToken(), 3*time.Second)
	env := append(os.Environ(),
		"KUBECONFIG="+d.cp.Kubeconfig,
		"KUBECACHEDIR="+filepath.Join(d.logDir, "kube-cache"), // kubectl's discovery cache, not ~/.kube
		"PATH="+filepath.Dir(plugin)+string(os.PathListSeparator)+d.cp.AssetsDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	var b strings.Builder
	for _, argv := range leaseCommands(d.ns, "demo") {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		cmd := exec.CommandContext(cctx, filepath.Join(d.cp.AssetsDir, argv[0]), argv[1:]...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
		}
		b.WriteString("$ " + strings.Join(argv, " ") + "\n" + string(out))
	}
	d.flushAll()
	d.outMu.Lock()
	defer d.outMu.Unlock()
	fmt.Fprintf(d.out, "%s %s\n%s", d.paint(dim, fmt.Sprintf("[%5.1fs]", time.Since(d.start).Seconds())), d.paint(bold, title), indent(b.String()))
	return nil
}

// waitLeaderEvent waits up to timeout for the Event "<leader> became leader
// with fencing token <token>" on the demo's Lease (the sidecar records it
// asynchronously).
func (d *demo) waitLeaderEvent(ctx context.Context, leader string, token int64, timeout time.Duration) {
	if leader == "" {
		return
	}
	want := fmt.Sprintf("%s became leader with fencing token %d", leader, token)
	sel := apifields.Set{"involvedObject.kind": "Lease", "involvedObject.name": "demo"}.AsSelector().String()
	deadline := time.Now().Add(timeout)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		evs, err := d.cp.Client.CoreV1().Events(d.ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err == nil {
			for _, e := range evs.Items {
				if e.Message == want {
					return
				}
			}
		}
		if sleep(ctx, 100*time.Millisecond) != nil {
			return
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (d *demo) startStore(ctx context.Context) error {
	addr, err := framework.FreeAddress()
	if err != nil {
		return err
	}
	p, err := framework.StartProcess(framework.ProcessSpec{
		Name:            "store",
		Path:            d.bins[framework.DemoPackage],
		Args:            []string{"store", "--listen=" + addr},
		LogDir:          d.logDir,
		NewProcessGroup: true,
	})
	if err != nil {
		return err
	}
	d.store = p
	d.storeURL = "http://" + addr
	c := httpstore.NewClient(d.storeURL, "demo")
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, _, err := c.Read(ctx); err == nil {
			return nil
		}
		if p.Exited() || time.Now().After(deadline) {
			return fmt.Errorf("fenced store did not start:\n%s", p.LogTail(20))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (d *demo) startPod(ctx context.Context, name string) error {
	sc, err := framework.StartCandidate(ctx, framework.CandidateSpec{
		Binary:          d.bins[framework.SidecarPackage],
		Identity:        name,
		LeaseName:       "demo",
		Namespace:       d.ns,
		Kubeconfig:      d.cp.Kubeconfig,
		Timings:         d.timings,
		LogDir:          d.logDir,
		NewProcessGroup: true,
	})
	if err != nil {
		return err
	}
	app, err := framework.StartProcess(framework.ProcessSpec{
		Name:            name + "-writer",
		Path:            d.bins[framework.DemoPackage],
		Args:            []string{"--sidecar=" + sc.URL, "--store=" + d.storeURL, "--interval=500ms", "--writer=" + name},
		LogDir:          d.logDir,
		Output:          framework.NewLineWriter(func(l string) { d.writerLine(name, l) }),
		NewProcessGroup: true,
	})
	if err != nil {
		sc.Stop(2 * time.Second)
		return err
	}
	d.mu.Lock()
	d.pods = append(d.pods, &pod{name: name, sidecar: sc, app: app})
	d.mu.Unlock()
	return nil
}

func (d *demo) stopAll() {
	d.mu.Lock()
	pods := append([]*pod(nil), d.pods...)
	d.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range pods {
		wg.Add(2)
		go func(p *pod) { defer wg.Done(); p.app.Stop(3 * time.Second) }(p)
		go func(p *pod) { defer wg.Done(); p.sidecar.Stop(3 * time.Second) }(p)
	}
	wg.Wait()
	if d.store != nil {
		d.store.Stop(3 * time.Second)
	}
	d.stopDBStore()
}

func (d *demo) pod(name string) *pod {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.pods {
		if p.name == name {
			return p
		}
	}
	return nil
}

func (d *demo) currentLeader() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.leader
}

func (d *demo) currentToken() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.token
}

// watchLeader polls every sidecar's /token and prints each change of leader.
func (d *demo) watchLeader(ctx context.Context) {
	for ctx.Err() == nil {
		d.mu.Lock()
		pods := append([]*pod(nil), d.pods...)
		d.mu.Unlock()
		type res struct {
			name string
			r    framework.TokenResult
		}
		results := make(chan res, len(pods))
		for _, p := range pods {
			go func(p *pod) {
				rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
				results <- res{p.name, p.sidecar.Token(rctx)}
			}(p)
		}
		leader, token, count := "", int64(0), 0
		for range pods {
			x := <-results
			if x.r.Valid() {
				leader, token = x.name, x.r.Token
				count++
			}
		}
		if ctx.Err() != nil {
			return
		}
		d.mu.Lock()
		changed := leader != d.leader || token != d.token
		if changed {
			d.leader, d.token = leader, token
			if leader != "" {
				d.tokens = append(d.tokens, token)
				d.lastLead = time.Now()
			}
		}
		d.mu.Unlock()
		switch {
		case count > 1:
			d.say(bold+red, "!! %d sidecars serve a token at once", count)
		case changed && leader == "":
			d.say(cyan, "○ no sidecar serves a token right now")
		case changed:
			d.say(bold+cyan, "★ %s leads: its sidecar serves fencing token %d", leader, token)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitLeader waits until some pod other than not leads and returns its name.
func (d *demo) waitLeader(ctx context.Context, timeout time.Duration, not string) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		if l := d.currentLeader(); l != "" && l != not {
			return l, nil
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			for _, p := range d.pods {
				fmt.Fprintf(&b, "--- %s sidecar log (%s):\n%s\n", p.name, p.sidecar.LogPath, p.sidecar.LogTail(15))
			}
			return "", fmt.Errorf("no leader (other than %q) within %v\n%s", not, timeout, b.String())
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return "", err
		}
	}
}

var fieldRe = regexp.MustCompile(`(\w+)=("(?:[^"\\]|\\.)*"|\S+)`)

func fields(line string) map[string]string {
	m := map[string]string{}
	for _, f := range fieldRe.FindAllStringSubmatch(line, -1) {
		v := f[2]
		if u, err := strconv.Unquote(v); err == nil {
			v = u
		}
		m[f[1]] = v
	}
	return m
}

// writerLine turns a writer's log line into timeline lines: every change of
// what the writer experiences, every rejection, and accepted writes in batches.
func (d *demo) writerLine(name, line string) {
	f := fields(line)
	kind := f["result"]
	tok, _ := strconv.ParseInt(f["token"], 10, 64)
	d.mu.Lock()
	d.stats[kind]++
	w := d.writers[name]
	if w == nil {
		w = &writerState{}
		d.writers[name] = w
	}
	changed := kind != w.kind || tok != w.token
	flush := w.pending
	if changed {
		w.pending = 0
	}
	prevTok := w.token
	w.kind, w.token = kind, tok
	if kind == "accepted" && !changed {
		w.pending++
	}
	if changed {
		w.lastShow = time.Now()
	}
	d.mu.Unlock()
	if flush > 0 && changed {
		d.say(green, "  %-6s ✓ %s accepted with token %d", name, moreWrites(flush), prevTok)
	}
	late := ""
	if f["late"] == "true" {
		late = " (the late write from before the pause)"
	}
	switch kind {
	case "accepted":
		if changed {
			d.say(green, "  %-6s ✓ write with token %d accepted by the store", name, tok)
		}
	case "rejected-stale":
		d.say(bold+red, "  %-6s ✗ write with token %s REJECTED by the store: stale, it already accepted token %s%s", name, f["token"], f["highest"], late)
	case "not-leader":
		if changed {
			d.say(dim, "  %-6s · sidecar says not leader (%s, holder %s): no write", name, f["status"], f["holder"])
		}
	case "sidecar-error", "store-error":
		if changed {
			d.say(yellow, "  %-6s ! %s: %s", name, kind, f["err"])
		}
	}
}

// flushWrites prints batched accepted writes every 2 seconds.
func (d *demo) flushWrites(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
		d.flushDue(2 * time.Second)
	}
}

func (d *demo) flushAll() { d.flushDue(0) }

func (d *demo) flushDue(age time.Duration) {
	d.mu.Lock()
	type line struct {
		name  string
		n     int
		token int64
	}
	var lines []line
	for name, w := range d.writers {
		if w.pending > 0 && time.Since(w.lastShow) >= age {
			lines = append(lines, line{name, w.pending, w.token})
			w.pending = 0
			w.lastShow = time.Now()
		}
	}
	d.mu.Unlock()
	sort.Slice(lines, func(i, j int) bool { return lines[i].name < lines[j].name })
	for _, l := range lines {
		d.say(green, "  %-6s ✓ %s accepted with token %d", l.name, moreWrites(l.n), l.token)
	}
}

func moreWrites(n int) string {
	if n == 1 {
		return "1 more write"
	}
	return fmt.Sprintf("%d more writes", n)
}
