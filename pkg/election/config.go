// Package election runs one candidate of a leader election on a
// coordination.k8s.io/v1 Lease and turns each acquisition into a fencing
// token (the Lease's spec.leaseTransitions as written by the acquiring
// update).
//
// Safety rules, in short:
//   - every write is a compare-and-swap on the Lease's resourceVersion;
//   - followers watch the Lease (no polling) and judge expiry on their own
//     monotonic clock, from the moment they observed the last change;
//   - every acquisition increments leaseTransitions past the highest value
//     this process has ever seen, also when the same identity takes the Lease
//     again, so tokens never go backwards while a candidate that saw the
//     Lease is running;
//   - the token is served only from the monotonic instant the last successful
//     renew was sent until other candidates could take over, less a margin.
package election

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
)

// Defaults match client-go's leaderelection.
const (
	DefaultLeaseDuration   = 15 * time.Second
	DefaultRenewDeadline   = 10 * time.Second
	DefaultRetryPeriod     = 2 * time.Second
	DefaultClockSkewMargin = 500 * time.Millisecond

	// JitterFactor is client-go's: leaseDuration > renewDeadline > JitterFactor*retryPeriod.
	JitterFactor = 1.2
)

// Config is everything one candidate needs. Validate it before use; New does.
type Config struct {
	// Client talks to the API server.
	Client kubernetes.Interface
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

	// Clock is the monotonic clock; nil means the real one.
	Clock clock.WithTicker
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Registerer receives the election metrics; nil registers none.
	Registerer prometheus.Registerer
	// Recorder, if set, gets a Kubernetes Event on the Lease for every
	// leadership change of this candidate (as client-go's elector does).
	Recorder record.EventRecorder
}

// LeaseKey returns "namespace/name".
func (c *Config) LeaseKey() string { return c.Namespace + "/" + c.Name }

// Validate checks the settings (not the client) and returns every problem.
// Each error's Field is the Config field's JSON-style path (leaseName,
// leaseNamespace, identity, leaseDuration, renewDeadline, retryPeriod,
// clockSkewMargin), so callers map it to their own names (flags, values)
// without reading the text.
func (c *Config) Validate() field.ErrorList {
	var errs field.ErrorList
	for _, f := range []struct {
		path  *field.Path
		value string
	}{{field.NewPath("leaseName"), c.Name}, {field.NewPath("leaseNamespace"), c.Namespace}} {
		if f.value == "" {
			errs = append(errs, field.Required(f.path, ""))
			continue
		}
		if msgs := validation.IsDNS1123Subdomain(f.value); len(msgs) > 0 {
			errs = append(errs, field.Invalid(f.path, f.value, strings.Join(msgs, "; ")))
		}
	}
	if strings.TrimSpace(c.Identity) == "" {
		errs = append(errs, field.Required(field.NewPath("identity"), "must not be empty or blank"))
	}
	if c.RetryPeriod <= 0 {
		errs = append(errs, field.Invalid(field.NewPath("retryPeriod"), c.RetryPeriod, "must be positive"))
	}
	ldPath := field.NewPath("leaseDuration")
	if c.LeaseDuration < time.Second {
		errs = append(errs, field.Invalid(ldPath, c.LeaseDuration, "must be at least 1s (the Lease stores whole seconds)"))
	}
	if c.LeaseDuration <= c.RenewDeadline {
		errs = append(errs, field.Invalid(ldPath, c.LeaseDuration, fmt.Sprintf("must be greater than renew deadline %v", c.RenewDeadline)))
	}
	if float64(c.RenewDeadline) <= JitterFactor*float64(c.RetryPeriod) {
		errs = append(errs, field.Invalid(field.NewPath("renewDeadline"), c.RenewDeadline, fmt.Sprintf("must be greater than %.1f x retry period %v", JitterFactor, c.RetryPeriod)))
	}
	skewPath := field.NewPath("clockSkewMargin")
	if c.ClockSkewMargin < 0 {
		errs = append(errs, field.Invalid(skewPath, c.ClockSkewMargin, "must not be negative"))
	} else if c.ClockSkewMargin >= c.LeaseDuration-c.RetryPeriod {
		errs = append(errs, field.Invalid(skewPath, c.ClockSkewMargin, fmt.Sprintf("must be less than lease duration minus retry period (%v), or the token would expire before the next renew", c.LeaseDuration-c.RetryPeriod)))
	}
	return errs
}
