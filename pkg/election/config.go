package election

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/clock"

	"github.com/elector-sidecar/elector-sidecar/pkg/kubeclient"
)

// Defaults match client-go's leaderelection.
const (
	DefaultLeaseDuration   = 15 * time.Second
	DefaultRenewDeadline   = 10 * time.Second
	DefaultRetryPeriod     = 2 * time.Second
	DefaultClockSkewMargin = 500 * time.Millisecond

	// JitterFactor is client-go's: leaseDuration > renewDeadline > JitterFactor*retryPeriod.
	// Validate checks it exactly (as renewDeadline-retryPeriod > retryPeriod/5).
	JitterFactor = 1.2
)

// Config is everything one candidate needs. Validate it before use; New does.
type Config struct {
	// Client talks to the API server; the election uses its Leases only.
	// The sidecar passes a *kubeclient.Client; tests and tools that have a
	// kubernetes.Interface wrap it with kubeclient/clientset.Wrap.
	Client kubeclient.Interface
	// Namespace and Name of the Lease.
	Namespace string
	Name      string
	// Identity is written as spec.holderIdentity (usually the pod name).
	Identity string

	// LeaseDuration is how long followers wait, from their observation of
	// the last change, before they take a Lease that was not renewed.
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader keeps trying to renew before it
	// gives up its term.
	RenewDeadline time.Duration
	// RetryPeriod is the leader's renew interval and the back-off between
	// failed API calls.
	RetryPeriod time.Duration
	// ClockSkewMargin is taken off the token's validity to cover clock-rate
	// differences between this process and the other candidates.
	ClockSkewMargin time.Duration
	// LeaseLabels are set on the Lease when this candidate creates it (or
	// restores it after a deletion). A Lease that lacks one of these keys
	// gets it with this candidate's next write of the Lease (acquire,
	// renew, raise or release); a key the Lease already has is never
	// changed, and no label is ever removed.
	LeaseLabels map[string]string
	// ExpectedCandidates is how many candidates usually run for this Lease
	// (the replica count); 0 means unknown. It only tunes how followers
	// spread their writes after a release (see ContendersAnnotation): a
	// release counts as contended by at least ExpectedCandidates-1
	// followers (without it: the estimate the Lease carries, learned from
	// its handoffs, or 16 before it has one). With 3 or fewer, followers
	// write at once from the first handoff; with 100, they spread over
	// about 1 s, the first write ~10 ms after the release. A hint far above
	// the real number slows handoffs (up to RetryPeriod); it never affects
	// who may lead.
	ExpectedCandidates int
	// DirectHandoff: this candidate announces itself on the Lease (one
	// patch when it starts campaigning, one when it stops), and when it
	// steps down it hands the Lease to the most recently announced
	// candidate, which takes it with one write and no race (handoff.go);
	// without an announced candidate it releases the Lease as without it.
	DirectHandoff bool
	// OwnLease: the Lease is this process's own, its only candidate, and
	// no other process serves its tokens (a shard set's session, whose
	// terms shards name by UID and count): found absent at start, it is
	// created at once instead of a lease duration later.
	OwnLease bool
	// ExternalWatch: Run starts no watch of its own; the caller feeds the
	// Lease's events into WatchStore from a reflector it runs (one watch
	// shared by several Leases, e.g. a shard set's, by label selector).
	ExternalWatch bool

	// Clock is the monotonic clock; nil means the real one.
	Clock clock.WithTicker
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Registerer receives the election metrics; nil registers none.
	Registerer prometheus.Registerer
	// Recorder, if set, gets a Kubernetes Event on the Lease for every
	// leadership change of this candidate (as client-go's elector does).
	Recorder EventRecorder

	// StartWithdrawn, if set, starts the candidate out of the election with
	// this reason (e.g. "app not healthy yet") until SetCandidate(true).
	StartWithdrawn string
	// BeforeRelease, if set, runs in the loop after a leader's token has
	// stopped and before the Lease is written free (graceful release,
	// withdrawal, shutdown), with a context bounded by BeforeReleaseTimeout:
	// e.g. remove a leader label from this pod first. It must return when
	// the context ends; the release goes on whatever it did.
	BeforeRelease func(ctx context.Context)

	// ShutdownHandoff says what the release at the end of Run promises the
	// app: HandoffAfterValidity (the default, "" too) lets no other process
	// lead until every token answer already handed out has run out,
	// because nothing guarantees the app stopped using it; HandoffImmediate
	// hands the Lease over at once, for when the platform stops the app
	// before this process (a native sidecar). A release the app asks for
	// (Release, ReleaseFor) is always immediate: the app gave the token back.
	ShutdownHandoff Handoff
}

// Handoff is Config.ShutdownHandoff.
type Handoff string

const (
	// HandoffAfterValidity: the next leader waits out the validity handed out.
	HandoffAfterValidity Handoff = "after-validity"
	// HandoffImmediate: the next leader may take the Lease at once.
	HandoffImmediate Handoff = "immediate"
)

// EventRecorder records Kubernetes Events: the sidecar's
// *kubeclient.Recorder, and client-go's record.EventRecorder (and its
// FakeRecorder) have this method.
type EventRecorder interface {
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any)
}

// MaxExpectedCandidates bounds Config.ExpectedCandidates.
const MaxExpectedCandidates = 100000

// BeforeReleaseTimeout bounds Config.BeforeRelease.
const BeforeReleaseTimeout = 300 * time.Millisecond

// LeaseKey returns "namespace/name".
func (c *Config) LeaseKey() string { return c.Namespace + "/" + c.Name }

// maxLeaseDuration is the longest lease duration: the Lease stores it as
// int32 seconds.
const maxLeaseDuration = math.MaxInt32 * time.Second

// Validate checks the settings (not the client) and returns every problem.
// Each error's Field is the Config field's JSON-style path (leaseName,
// leaseNamespace, identity, leaseDuration, renewDeadline, retryPeriod,
// clockSkewMargin, leaseLabels, expectedCandidates, shutdownHandoff), so callers map it to their own names (flags, values)
// without reading the text. Type is field.ErrorTypeRequired for an empty
// string and field.ErrorTypeInvalid otherwise; BadValue is the string, or a
// metav1.Duration for the durations (it prints as "10s", not nanoseconds),
// "key=value" for a bad Lease label, and the int for expectedCandidates.
func (c *Config) Validate() field.ErrorList {
	var errs field.ErrorList
	// Lease names are DNS-1123 subdomains, namespaces DNS-1123 labels, as
	// the API server validates them.
	for _, f := range []struct {
		path  *field.Path
		value string
		check func(string) []string
	}{
		{field.NewPath("leaseName"), c.Name, validation.IsDNS1123Subdomain},
		{field.NewPath("leaseNamespace"), c.Namespace, validation.IsDNS1123Label},
	} {
		if f.value == "" {
			errs = append(errs, field.Required(f.path, ""))
			continue
		}
		if msgs := f.check(f.value); len(msgs) > 0 {
			errs = append(errs, field.Invalid(f.path, f.value, strings.Join(msgs, "; ")))
		}
	}
	idPath := field.NewPath("identity")
	if c.Identity == "" {
		errs = append(errs, field.Required(idPath, ""))
	} else if strings.TrimSpace(c.Identity) == "" {
		errs = append(errs, field.Invalid(idPath, c.Identity, "must not be blank"))
	}
	if c.RetryPeriod <= 0 {
		errs = append(errs, field.Invalid(field.NewPath("retryPeriod"), duration(c.RetryPeriod), "must be positive"))
	}
	ldPath := field.NewPath("leaseDuration")
	switch {
	case c.LeaseDuration < time.Second:
		errs = append(errs, field.Invalid(ldPath, duration(c.LeaseDuration), "must be at least 1s (the Lease stores whole seconds)"))
	case c.LeaseDuration > maxLeaseDuration:
		errs = append(errs, field.Invalid(ldPath, duration(c.LeaseDuration), fmt.Sprintf("must be at most %v (the Lease stores int32 seconds)", maxLeaseDuration)))
	case c.LeaseDuration <= c.RenewDeadline:
		errs = append(errs, field.Invalid(ldPath, duration(c.LeaseDuration), fmt.Sprintf("must be greater than renew deadline %v", c.RenewDeadline)))
	}
	rdPath := field.NewPath("renewDeadline")
	// renewDeadline > JitterFactor*retryPeriod, exactly, in integers: for a
	// whole number of nanoseconds d-r, d-r > r/5 (real) iff d-r > floor(r/5).
	if c.RenewDeadline <= 0 {
		errs = append(errs, field.Invalid(rdPath, duration(c.RenewDeadline), "must be positive"))
	} else if c.RetryPeriod > 0 && c.RenewDeadline-c.RetryPeriod <= c.RetryPeriod/5 {
		errs = append(errs, field.Invalid(rdPath, duration(c.RenewDeadline), fmt.Sprintf("must be greater than %.1f x retry period %v", JitterFactor, c.RetryPeriod)))
	}
	labelsPath := field.NewPath("leaseLabels")
	keys := make([]string, 0, len(c.LeaseLabels))
	for k := range c.LeaseLabels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := c.LeaseLabels[k]
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			errs = append(errs, field.Invalid(labelsPath, k+"="+v, "invalid label key: "+strings.Join(msgs, "; ")))
		} else if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
			errs = append(errs, field.Invalid(labelsPath, k+"="+v, "invalid label value: "+strings.Join(msgs, "; ")))
		}
	}
	if c.ExpectedCandidates < 0 || c.ExpectedCandidates > MaxExpectedCandidates {
		errs = append(errs, field.Invalid(field.NewPath("expectedCandidates"), c.ExpectedCandidates, fmt.Sprintf("must be between 0 (unknown) and %d", MaxExpectedCandidates)))
	}
	switch c.ShutdownHandoff {
	case "", HandoffAfterValidity, HandoffImmediate:
	default:
		errs = append(errs, field.NotSupported(field.NewPath("shutdownHandoff"), c.ShutdownHandoff, []Handoff{HandoffAfterValidity, HandoffImmediate}))
	}
	skewPath := field.NewPath("clockSkewMargin")
	if c.ClockSkewMargin < 0 {
		errs = append(errs, field.Invalid(skewPath, duration(c.ClockSkewMargin), "must not be negative"))
	} else if c.RetryPeriod > 0 && c.ClockSkewMargin >= c.LeaseDuration-c.RetryPeriod {
		errs = append(errs, field.Invalid(skewPath, duration(c.ClockSkewMargin), fmt.Sprintf("must be less than lease duration minus retry period (%v), or the token would expire before the next renew", c.LeaseDuration-c.RetryPeriod)))
	}
	return errs
}

// duration is a field.Error BadValue that keeps the type and prints as
// "10s" (field.Error renders a bare time.Duration as nanoseconds).
func duration(d time.Duration) metav1.Duration { return metav1.Duration{Duration: d} }
