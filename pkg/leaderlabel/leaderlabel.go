// Package leaderlabel keeps a label on the leader's pod, so that a Service
// can select the leader alone (leader-only routing).
//
// While this pod leads (its token is valid), its own pod carries KEY=true.
// The label goes when the pod stops leading: before the Lease is released
// on a graceful step-down (BeforeRelease, run by the election loop with a
// bounded context), and as soon as the elector reports the loss otherwise
// (the token ran out, the Lease was taken). A new leader removes the label
// from every other pod of the namespace that still carries it (a frozen or
// crashed previous holder), and a starting sidecar removes a stale label
// from its own pod.
//
// The label is reconciled against the Pod as it is, not as remembered: the
// labeler reads its own pod again at the start of every term of its own
// (another leader may have removed the label meanwhile), after every failed
// patch, and, while it leads, every ResyncPeriod, when it also lists the
// other labelled pods again (a label removed from the leader or added to
// another pod by hand). A pass
// that adds the label checks, after the patch, that this pod still holds the
// same term, and takes the label off again if not (a step-down during the
// pass). When Run stops (after the election's release, at shutdown) it
// removes the label from its own pod unless it still leads, within
// StopTimeout. So, while the API server answers: a leader's pod misses the
// label for at most ResyncPeriod (plus the calls of one pass); a pod whose
// term ended loses it within the back-off of its own failed removals, when
// its sidecar stops, or at the next leader's first pass or resync; a label
// added by hand to a pod that does not lead goes at the leader's next resync.
// (The sidecar sets ResyncPeriod to its lease duration.)
//
// Every write is a JSON merge patch of metadata.labels with this one key
// (removal patches it to null); a pod that is gone (404) needs nothing.
// Failed writes are retried with exponential back-off. The reconciler runs
// in its own goroutine (Run) driven by the elector's Changed channel, so the
// election never waits for it; only BeforeRelease waits, bounded by its
// context.
//
// Sync is the algorithm apart from the timing: one synchronous pass with
// the given status, which tests drive one step at a time.
package leaderlabel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
	"github.com/elector-sidecar/elector-sidecar/pkg/kubeclient"
)

// DefaultKey is the chart's label key.
const DefaultKey = "elector-sidecar.io/leader"

// Value is the label's value on the leader's pod.
const Value = "true"

// RequestTimeout bounds each API call of the reconciler.
const RequestTimeout = 5 * time.Second

// DefaultResyncPeriod is how often Run, while it leads, reads its own pod
// and lists the labelled pods again with no change of the election.
const DefaultResyncPeriod = 30 * time.Second

// DefaultStopTimeout bounds the removal of the label when Run stops.
const DefaultStopTimeout = 2 * time.Second

// DefaultBackoff is the retry back-off after a failed pass: 100ms doubling
// to 5s, with 10% jitter. It restarts after a pass that succeeds.
var DefaultBackoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 5 * time.Second}

// Source is what the labeler reads: *election.Elector.
type Source interface {
	Changed() <-chan struct{}
	Status() election.Status
}

// Config is one labeler's settings and dependencies.
type Config struct {
	// Client patches and lists pods in Namespace (its Pods only; wrap a
	// kubernetes.Interface with kubeclient/clientset.Wrap).
	Client kubeclient.Interface
	// Namespace and PodName of this pod (the sidecar's Lease namespace and
	// holder identity).
	Namespace string
	PodName   string
	// Key is the label key (a qualified name, e.g. DefaultKey).
	Key string
	// PodSelector, if set, is a label selector that the pods of this
	// election (one release) carry, e.g. app.kubernetes.io/instance=billing:
	// a new leader removes the label only from those, so that two
	// elections in one namespace with one key do not strip each other's
	// label. Empty: every pod of the namespace that carries the label.
	PodSelector string
	// Backoff between failed passes; zero means DefaultBackoff.
	Backoff wait.Backoff
	// ResyncPeriod between a leader's passes that read the pods again with
	// no change of the election; zero means DefaultResyncPeriod.
	ResyncPeriod time.Duration
	// StopTimeout bounds the removal of this pod's label when Run stops;
	// zero means DefaultStopTimeout.
	StopTimeout time.Duration
	// Clock for the back-off and resync timers; nil means the real one.
	Clock clock.WithTicker
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Registerer receives elector_leader_label_patches_total; nil: none.
	Registerer prometheus.Registerer
}

// ValidateKey returns why key is not a valid label key ("" if it is).
func ValidateKey(key string) string {
	if key == "" {
		return "must not be empty"
	}
	return strings.Join(validation.IsQualifiedName(key), "; ")
}

// Labeler keeps the leader label of one pod. Create it with New.
type Labeler struct {
	cfg     Config
	log     *slog.Logger
	clock   clock.WithTicker
	patches *prometheus.CounterVec
	// others selects the pods a new leader removes the label from.
	others string

	// sem serializes passes and BeforeRelease (a channel, so that
	// BeforeRelease can stop waiting when its context ends). Whoever holds
	// it owns the fields below.
	sem chan struct{}
	// self: whether our pod carries the label, as far as we know (nil:
	// not known: the start, a failed patch, a resync; read it again).
	self *bool
	// selfTerm is the token of the term during which self was last read
	// from the pod (0: none); a new term of ours reads it again.
	selfTerm int64
	// cleanedTerm is the token of the term for which the other pods'
	// labels were removed (0: none yet).
	cleanedTerm int64
	// gone: our pod does not exist (404); nothing to write to it.
	gone bool
}

// New validates cfg and returns a labeler that has not started.
func New(cfg Config) (*Labeler, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("leader label: client must be set")
	case cfg.Namespace == "" || cfg.PodName == "":
		return nil, fmt.Errorf("leader label: namespace %q and pod name %q must be set", cfg.Namespace, cfg.PodName)
	}
	if why := ValidateKey(cfg.Key); why != "" {
		return nil, fmt.Errorf("leader label key %q: %s", cfg.Key, why)
	}
	others, err := othersSelector(cfg.Key, cfg.PodSelector)
	if err != nil {
		return nil, err
	}
	if cfg.Backoff.Duration == 0 {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.ResyncPeriod <= 0 {
		cfg.ResyncPeriod = DefaultResyncPeriod
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = DefaultStopTimeout
	}
	l := &Labeler{
		cfg:    cfg,
		others: others,
		log:    cfg.Logger,
		clock:  cfg.Clock,
		sem:    make(chan struct{}, 1),
		patches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "elector_leader_label_patches_total",
			Help: "Patches of the leader label on pods, by op (add, remove) and result (ok, not_found, error).",
		}, []string{"op", "result"}),
	}
	if l.log == nil {
		l.log = slog.Default()
	}
	l.log = l.log.With("labelKey", cfg.Key, "pod", cfg.Namespace+"/"+cfg.PodName)
	if l.clock == nil {
		l.clock = clock.RealClock{}
	}
	for _, op := range []string{"add", "remove"} {
		for _, r := range []string{"ok", "not_found", "error"} {
			l.patches.WithLabelValues(op, r)
		}
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(l.patches); err != nil {
			return nil, fmt.Errorf("registering leader label metrics: %w", err)
		}
	}
	return l, nil
}

// Sync makes one pass for status st: it removes a stale label from our pod,
// adds it while we lead (after removing it from the other pods that carry
// it, once per term), and removes it when we do not lead. It returns the
// first failure (the pass stops there; the next one starts over).
func (l *Labeler) Sync(ctx context.Context, st election.Status) error {
	return l.sync(ctx, func() election.Status { return st })
}

func (l *Labeler) sync(ctx context.Context, status func() election.Status) error {
	select {
	case l.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-l.sem }()
	// The status is read under the lock: if BeforeRelease ran while this
	// pass waited, the token has stopped and the label stays off.
	st := status()
	leading := st.IsLeader
	if leading && st.Token != l.selfTerm {
		// A new term of ours: another leader may have removed our label
		// since we last looked (as a former leader's), or a removal of ours
		// may have been lost: read the pod as it is.
		l.self = nil
	}
	if leading && st.Token != l.cleanedTerm {
		if err := l.removeFromOthers(ctx, st.Token); err != nil {
			return err
		}
	}
	if !leading {
		return l.setSelf(ctx, false)
	}
	// The status may have changed during the calls above (a step-down whose
	// BeforeRelease could not wait for this pass): check it again right
	// before the add and right after it, and take the label off if this
	// term is over.
	if now := status(); !now.IsLeader || now.Token != st.Token {
		return l.setSelf(ctx, false)
	}
	if err := l.setSelf(ctx, true); err != nil {
		return err
	}
	l.selfTerm = st.Token
	if now := status(); !now.IsLeader || now.Token != st.Token {
		l.log.Info("leader label: the term ended during the pass; removing the label again")
		l.selfTerm = 0
		return l.setSelf(ctx, false)
	}
	return nil
}

// BeforeRelease removes the label from our pod; the election calls it after
// the token stopped and before the Lease is written free (Config.
// BeforeRelease). It retries until ctx ends.
func (l *Labeler) BeforeRelease(ctx context.Context) {
	select {
	case l.sem <- struct{}{}:
	case <-ctx.Done():
		l.log.Warn("leader label: not removed before the release: a pass was still running", "err", ctx.Err())
		return
	}
	defer func() { <-l.sem }()
	backoff := wait.Backoff{Duration: 20 * time.Millisecond, Factor: 2, Steps: 1 << 30, Cap: 100 * time.Millisecond}
	for {
		err := l.setSelf(ctx, false)
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			l.log.Warn("leader label: not removed before the release; retried after it", "err", err)
			return
		case <-l.clock.After(backoff.Step()):
		}
	}
}

// setSelf brings our pod's label to want. At the start (not known) it reads
// the pod first, so that a pod without a stale label sees no write.
func (l *Labeler) setSelf(ctx context.Context, want bool) error {
	if l.gone {
		return nil
	}
	if l.self == nil {
		rctx, cancel := context.WithTimeout(ctx, RequestTimeout)
		pod, err := l.cfg.Client.Pods(l.cfg.Namespace).Get(rctx, l.cfg.PodName, metav1.GetOptions{})
		cancel()
		switch {
		case apierrors.IsNotFound(err):
			l.podGone()
			return nil
		case err != nil:
			return fmt.Errorf("reading pod %s/%s: %w", l.cfg.Namespace, l.cfg.PodName, err)
		}
		has := pod.Labels[l.cfg.Key] == Value
		l.self = &has
		if has && !want {
			l.log.Info("leader label: removing a stale label from this pod")
		}
	}
	if *l.self == want {
		return nil
	}
	switch err := l.patch(ctx, l.cfg.PodName, want); {
	case apierrors.IsNotFound(err):
		l.podGone()
		return nil
	case err != nil:
		l.self = nil // it may or may not have been written: read it again
		return err
	}
	l.self = &want
	if want {
		l.log.Info("leader label: added to this pod")
	} else {
		l.log.Info("leader label: removed from this pod")
	}
	return nil
}

func (l *Labeler) podGone() {
	l.gone = true
	f := false
	l.self = &f
	l.log.Warn("leader label: this pod does not exist; nothing to label (is --identity the pod name?)")
}

// removeFromOthers removes the label from every other pod of the namespace
// that carries it (of this election's pods: PodSelector), once per term
// (token).
func (l *Labeler) removeFromOthers(ctx context.Context, token int64) error {
	rctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	sel := l.others
	pods, err := l.cfg.Client.Pods(l.cfg.Namespace).List(rctx, metav1.ListOptions{LabelSelector: sel})
	cancel()
	if err != nil {
		return fmt.Errorf("listing pods with %s: %w", sel, err)
	}
	for _, p := range pods.Items {
		if p.Name == l.cfg.PodName {
			continue
		}
		if err := l.patch(ctx, p.Name, false); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		l.log.Info("leader label: removed from a former leader's pod", "formerLeader", p.Name)
	}
	l.cleanedTerm = token
	return nil
}

// patch sets (on) or removes the label on pod with a JSON merge patch of
// metadata.labels.
func (l *Labeler) patch(ctx context.Context, pod string, on bool) error {
	var v any // nil: JSON null removes the key
	op := "remove"
	if on {
		v, op = Value, "add"
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{l.cfg.Key: v}}})
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	_, err = l.cfg.Client.Pods(l.cfg.Namespace).Patch(rctx, pod, types.MergePatchType, body, metav1.PatchOptions{})
	switch {
	case err == nil:
		l.patches.WithLabelValues(op, "ok").Inc()
		return nil
	case apierrors.IsNotFound(err):
		l.patches.WithLabelValues(op, "not_found").Inc()
		l.log.Debug("leader label: pod is gone", "target", pod, "op", op)
		return err
	default:
		l.patches.WithLabelValues(op, "error").Inc()
		return fmt.Errorf("patching the leader label (%s) on pod %s/%s: %w", op, l.cfg.Namespace, pod, err)
	}
}
