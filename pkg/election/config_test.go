package election

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// configPaths is every field path Validate reports; TestConfigValidate
// triggers each of them, and callers (the sidecar's flag mapping) rely on
// this list being complete.
var configPaths = []string{"leaseName", "leaseNamespace", "identity", "leaseDuration", "renewDeadline", "retryPeriod", "clockSkewMargin", "leaseLabels", "expectedCandidates"}

// fieldErr is what a case asserts about one error: where and what kind.
type fieldErr struct {
	path string
	typ  field.ErrorType
}

func required(path string) fieldErr { return fieldErr{path, field.ErrorTypeRequired} }
func invalid(path string) fieldErr  { return fieldErr{path, field.ErrorTypeInvalid} }

func validConfig() Config {
	return Config{Namespace: "ns", Name: "lease", Identity: "pod-a",
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second, ClockSkewMargin: 500 * time.Millisecond}
}

// timings sets the four durations.
func timings(lease, renew, retry, skew time.Duration) func(*Config) {
	return func(c *Config) {
		c.LeaseDuration, c.RenewDeadline, c.RetryPeriod, c.ClockSkewMargin = lease, renew, retry, skew
	}
}

func TestConfigValidate(t *testing.T) {
	const ns = time.Nanosecond
	tests := []struct {
		name   string
		mutate func(*Config)
		want   []fieldErr // in order; nil: valid
	}{
		{name: "defaults", mutate: func(*Config) {}},
		{name: "short timings", mutate: timings(3*time.Second, 2*time.Second, 500*time.Millisecond, 200*time.Millisecond)},
		{name: "zero config reports every empty field", mutate: func(c *Config) { *c = Config{} },
			want: []fieldErr{required("leaseName"), required("leaseNamespace"), required("identity"), invalid("retryPeriod"), invalid("leaseDuration"), invalid("renewDeadline")}},

		// leaseName: a DNS-1123 subdomain (at most 253 characters, dots allowed).
		{name: "lease name empty", mutate: func(c *Config) { c.Name = "" }, want: []fieldErr{required("leaseName")}},
		{name: "lease name uppercase and underscore", mutate: func(c *Config) { c.Name = "Not_A_Name" }, want: []fieldErr{invalid("leaseName")}},
		{name: "lease name with dots", mutate: func(c *Config) { c.Name = "billing.nightly" }},
		{name: "lease name 253 characters", mutate: func(c *Config) { c.Name = strings.Repeat("a", 253) }},
		{name: "lease name 254 characters", mutate: func(c *Config) { c.Name = strings.Repeat("a", 254) }, want: []fieldErr{invalid("leaseName")}},

		// leaseNamespace: a DNS-1123 label (at most 63 characters, no dots).
		{name: "namespace empty", mutate: func(c *Config) { c.Namespace = "" }, want: []fieldErr{required("leaseNamespace")}},
		{name: "namespace with slash", mutate: func(c *Config) { c.Namespace = "a/b" }, want: []fieldErr{invalid("leaseNamespace")}},
		{name: "namespace with dot", mutate: func(c *Config) { c.Namespace = "a.b" }, want: []fieldErr{invalid("leaseNamespace")}},
		{name: "namespace 63 characters", mutate: func(c *Config) { c.Namespace = strings.Repeat("a", 63) }},
		{name: "namespace 64 characters", mutate: func(c *Config) { c.Namespace = strings.Repeat("a", 64) }, want: []fieldErr{invalid("leaseNamespace")}},

		// identity: anything but empty or blank.
		{name: "identity empty", mutate: func(c *Config) { c.Identity = "" }, want: []fieldErr{required("identity")}},
		{name: "identity blank", mutate: func(c *Config) { c.Identity = " \t" }, want: []fieldErr{invalid("identity")}},
		{name: "identity with spaces around", mutate: func(c *Config) { c.Identity = " a " }},

		// retryPeriod > 0.
		{name: "retry period zero", mutate: func(c *Config) { c.RetryPeriod = 0 }, want: []fieldErr{invalid("retryPeriod")}},
		{name: "retry period negative", mutate: func(c *Config) { c.RetryPeriod = -ns }, want: []fieldErr{invalid("retryPeriod")}},
		{name: "retry period 1ns", mutate: func(c *Config) { c.RetryPeriod = ns }},

		// 1s <= leaseDuration <= MaxInt32 seconds.
		{name: "lease duration just under 1s", mutate: timings(time.Second-ns, 500*time.Millisecond, 100*time.Millisecond, 0), want: []fieldErr{invalid("leaseDuration")}},
		{name: "lease duration 1s", mutate: timings(time.Second, 500*time.Millisecond, 100*time.Millisecond, 0)},
		{name: "lease duration at the int32 seconds limit", mutate: func(c *Config) { c.LeaseDuration = maxLeaseDuration }},
		{name: "lease duration over the int32 seconds limit", mutate: func(c *Config) { c.LeaseDuration = maxLeaseDuration + ns }, want: []fieldErr{invalid("leaseDuration")}},

		// leaseDuration > renewDeadline.
		{name: "lease duration equals renew deadline", mutate: func(c *Config) { c.LeaseDuration = c.RenewDeadline }, want: []fieldErr{invalid("leaseDuration")}},
		{name: "lease duration below renew deadline", mutate: func(c *Config) { c.LeaseDuration = c.RenewDeadline - ns }, want: []fieldErr{invalid("leaseDuration")}},
		{name: "lease duration just above renew deadline", mutate: func(c *Config) { c.LeaseDuration = c.RenewDeadline + ns }},

		// renewDeadline > 0 and renewDeadline > 1.2 x retryPeriod.
		{name: "renew deadline zero", mutate: func(c *Config) { c.RenewDeadline = 0 }, want: []fieldErr{invalid("renewDeadline")}},
		{name: "renew deadline negative", mutate: func(c *Config) { c.RenewDeadline = -time.Second }, want: []fieldErr{invalid("renewDeadline")}},
		{name: "renew deadline equals 1.2 x retry period", mutate: timings(15*time.Second, 6*time.Second, 5*time.Second, 0), want: []fieldErr{invalid("renewDeadline")}},
		{name: "renew deadline just above 1.2 x retry period", mutate: timings(15*time.Second, 6*time.Second+ns, 5*time.Second, 0)},
		{name: "renew deadline equals retry period", mutate: func(c *Config) { c.RetryPeriod = c.RenewDeadline }, want: []fieldErr{invalid("renewDeadline")}},

		// 0 <= clockSkewMargin < leaseDuration - retryPeriod.
		{name: "margin negative", mutate: func(c *Config) { c.ClockSkewMargin = -ns }, want: []fieldErr{invalid("clockSkewMargin")}},
		{name: "margin zero", mutate: func(c *Config) { c.ClockSkewMargin = 0 }},
		{name: "margin equals lease duration minus retry period", mutate: func(c *Config) { c.ClockSkewMargin = 13 * time.Second }, want: []fieldErr{invalid("clockSkewMargin")}},
		{name: "margin just under lease duration minus retry period", mutate: func(c *Config) { c.ClockSkewMargin = 13*time.Second - ns }},

		// leaseLabels: qualified-name keys, label values.
		{name: "labels of a release", mutate: func(c *Config) {
			c.LeaseLabels = map[string]string{"app.kubernetes.io/name": "elector-sidecar", "app.kubernetes.io/instance": "billing", "empty": ""}
		}},
		{name: "label key with a space", mutate: func(c *Config) { c.LeaseLabels = map[string]string{"my team": "a"} }, want: []fieldErr{invalid("leaseLabels")}},
		{name: "label key with two slashes", mutate: func(c *Config) { c.LeaseLabels = map[string]string{"a/b/c": "a"} }, want: []fieldErr{invalid("leaseLabels")}},
		{name: "label key empty", mutate: func(c *Config) { c.LeaseLabels = map[string]string{"": "a"} }, want: []fieldErr{invalid("leaseLabels")}},
		{name: "label key name 63 characters", mutate: func(c *Config) { c.LeaseLabels = map[string]string{strings.Repeat("k", 63): "a"} }},
		{name: "label key name 64 characters", mutate: func(c *Config) { c.LeaseLabels = map[string]string{strings.Repeat("k", 64): "a"} }, want: []fieldErr{invalid("leaseLabels")}},
		{name: "label value 63 characters", mutate: func(c *Config) { c.LeaseLabels = map[string]string{"k": strings.Repeat("v", 63)} }},
		{name: "label value 64 characters", mutate: func(c *Config) { c.LeaseLabels = map[string]string{"k": strings.Repeat("v", 64)} }, want: []fieldErr{invalid("leaseLabels")}},
		{name: "label value with a slash", mutate: func(c *Config) { c.LeaseLabels = map[string]string{"k": "team/billing"} }, want: []fieldErr{invalid("leaseLabels")}},
		{name: "two bad labels, in key order", mutate: func(c *Config) { c.LeaseLabels = map[string]string{"z": "-bad", "a": "bad-"} },
			want: []fieldErr{invalid("leaseLabels"), invalid("leaseLabels")}},

		// expectedCandidates: 0 (unknown) up to MaxExpectedCandidates.
		{name: "expected candidates unknown", mutate: func(c *Config) { c.ExpectedCandidates = 0 }},
		{name: "expected candidates 1", mutate: func(c *Config) { c.ExpectedCandidates = 1 }},
		{name: "expected candidates at the maximum", mutate: func(c *Config) { c.ExpectedCandidates = MaxExpectedCandidates }},
		{name: "expected candidates negative", mutate: func(c *Config) { c.ExpectedCandidates = -1 }, want: []fieldErr{invalid("expectedCandidates")}},
		{name: "expected candidates above the maximum", mutate: func(c *Config) { c.ExpectedCandidates = MaxExpectedCandidates + 1 }, want: []fieldErr{invalid("expectedCandidates")}},

		{name: "several problems at once", mutate: func(c *Config) { c.Name, c.LeaseDuration, c.ClockSkewMargin = "x_y", 10*time.Second, -time.Second },
			want: []fieldErr{invalid("leaseName"), invalid("leaseDuration"), invalid("clockSkewMargin")}},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.mutate(&c)
			errs := c.Validate()
			var got []fieldErr
			for _, e := range errs {
				got = append(got, fieldErr{e.Field, e.Type})
				seen[e.Field] = true
				checkBadValue(t, e)
			}
			if !equalErrs(got, tt.want) {
				t.Fatalf("Validate() = %v\ngot  %v\nwant %v", errs.ToAggregate(), got, tt.want)
			}
		})
	}
	// Every documented path is covered above, and no other path exists.
	for _, p := range configPaths {
		if !seen[p] {
			t.Errorf("no case triggers an error on %s", p)
		}
		delete(seen, p)
	}
	for p := range seen {
		t.Errorf("Validate reported path %s, which configPaths (and the doc comment, and callers' mappings) do not list", p)
	}
}

// checkBadValue: Required carries no value; strings stay strings; durations
// are metav1.Duration, so field.Error prints "10s", not nanoseconds.
func checkBadValue(t *testing.T, e *field.Error) {
	t.Helper()
	switch e.Type {
	case field.ErrorTypeRequired:
	case field.ErrorTypeInvalid:
		switch e.Field {
		case "leaseName", "leaseNamespace", "identity", "leaseLabels":
			if _, ok := e.BadValue.(string); !ok {
				t.Errorf("%s: BadValue %T, want string", e.Field, e.BadValue)
			}
		case "expectedCandidates":
			if _, ok := e.BadValue.(int); !ok {
				t.Errorf("%s: BadValue %T, want int", e.Field, e.BadValue)
			}
		default:
			if _, ok := e.BadValue.(metav1.Duration); !ok {
				t.Errorf("%s: BadValue %T, want metav1.Duration", e.Field, e.BadValue)
			}
		}
	default:
		t.Errorf("%s: error type %s, want Required or Invalid", e.Field, e.Type)
	}
	if e.Detail == "" && e.Type != field.ErrorTypeRequired {
		t.Errorf("%s: no detail", e.Field)
	}
}

func equalErrs(a, b []fieldErr) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The jitter rule is exact at its boundary for any retry period, not only
// round ones: renewDeadline = retryPeriod + retryPeriod/5 is rejected when
// that is 1.2 x retryPeriod, and one nanosecond above 1.2 x is accepted.
func TestConfigValidateJitterBoundary(t *testing.T) {
	for _, retry := range []time.Duration{1, 4, 5, 7, 999, 3 * time.Millisecond, 7*time.Second + 3, 41 * time.Hour} {
		// The smallest valid renew deadline: floor(1.2 x retry) + 1.
		lowest := retry + retry/5 + 1
		for _, tc := range []struct {
			renew time.Duration
			valid bool
		}{{lowest - 1, false}, {lowest, true}} {
			c := validConfig()
			c.RetryPeriod, c.RenewDeadline = retry, tc.renew
			c.LeaseDuration = max(time.Second, tc.renew+1)
			c.ClockSkewMargin = 0
			errs := c.Validate()
			if got := len(errs) == 0; got != tc.valid {
				t.Errorf("retry %v renew %v: Validate() = %v, want valid=%v", retry, tc.renew, errs.ToAggregate(), tc.valid)
			}
			for _, e := range errs {
				if e.Field != "renewDeadline" {
					t.Errorf("retry %v renew %v: unexpected %v", retry, tc.renew, e)
				}
			}
		}
	}
}

// The text reads well on its own: durations as "10s", never nanoseconds.
func TestConfigValidateText(t *testing.T) {
	c := validConfig()
	c.LeaseDuration = 10 * time.Second
	got := c.Validate().ToAggregate().Error()
	want := `leaseDuration: Invalid value: "10s": must be greater than renew deadline 10s`
	if got != want {
		t.Fatalf("Validate() = %q, want %q", got, want)
	}
}
