package sidecar

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/pflag"

	"github.com/elector-sidecar/elector-sidecar/pkg/apphealth"
	"github.com/elector-sidecar/elector-sidecar/pkg/election"
	"github.com/elector-sidecar/elector-sidecar/pkg/leaderlabel"
)

// flagSpec ties a flag to its environment variable.
type flagSpec struct {
	name, env string
}

// Flags lists every flag that has an environment variable (all but
// --version), for Parse, docs and tests.
var Flags = []flagSpec{
	{"lease-name", "ELECTOR_LEASE_NAME"},
	{"lease-namespace", "ELECTOR_LEASE_NAMESPACE"},
	{"identity", "ELECTOR_IDENTITY"},
	{"lease-duration", "ELECTOR_LEASE_DURATION"},
	{"renew-deadline", "ELECTOR_RENEW_DEADLINE"},
	{"retry-period", "ELECTOR_RETRY_PERIOD"},
	{"clock-skew-margin", "ELECTOR_CLOCK_SKEW_MARGIN"},
	{"http-address", "ELECTOR_HTTP_ADDRESS"},
	{"http-endpoint", "ELECTOR_HTTP_ENDPOINT"},
	{"metrics-address", "ELECTOR_METRICS_ADDRESS"},
	{"kubeconfig", "ELECTOR_KUBECONFIG"},
	{"log-format", "ELECTOR_LOG_FORMAT"},
	{"log-level", "ELECTOR_LOG_LEVEL"},
	{"app-health-url", "ELECTOR_APP_HEALTH_URL"},
	{"app-health-period", "ELECTOR_APP_HEALTH_PERIOD"},
	{"app-health-timeout", "ELECTOR_APP_HEALTH_TIMEOUT"},
	{"app-health-failure-threshold", "ELECTOR_APP_HEALTH_FAILURE_THRESHOLD"},
	{"app-health-success-threshold", "ELECTOR_APP_HEALTH_SUCCESS_THRESHOLD"},
	{"leader-label", "ELECTOR_LEADER_LABEL"},
	{"leader-label-selector", "ELECTOR_LEADER_LABEL_SELECTOR"},
	{"lease-labels", "ELECTOR_LEASE_LABELS"},
	{"expected-candidates", "ELECTOR_EXPECTED_CANDIDATES"},
	{"shutdown-handoff", "ELECTOR_SHUTDOWN_HANDOFF"},
	{"direct-handoff", "ELECTOR_DIRECT_HANDOFF"},
	{"shards", "ELECTOR_SHARDS"},
	{"kube-api-qps", "ELECTOR_KUBE_API_QPS"},
	{"kube-api-burst", "ELECTOR_KUBE_API_BURST"},
}

// aliasSpec is another program's name for one of our flags.
type aliasSpec struct {
	name, of, from string
}

const (
	fromCSI           = "the CSI sidecars"
	fromComponentBase = "component-base (kube-controller-manager, kube-scheduler)"
)

// Aliases are the names the CSI sidecars (--leader-election-*) and
// component-base (--leader-elect-*) give the same settings, so that a
// command line carried over from them works. They have no environment
// variables of their own; an alias and its flag (or two aliases of one
// flag) on one command line are a usage error. -h lists them under their
// flag; the README lists them too.
var Aliases = []aliasSpec{
	{"leader-election-namespace", "lease-namespace", fromCSI},
	{"leader-election-lease-duration", "lease-duration", fromCSI},
	{"leader-election-renew-deadline", "renew-deadline", fromCSI},
	{"leader-election-retry-period", "retry-period", fromCSI},
	{"leader-elect-resource-name", "lease-name", fromComponentBase},
	{"leader-elect-resource-namespace", "lease-namespace", fromComponentBase},
	{"leader-elect-lease-duration", "lease-duration", fromComponentBase},
	{"leader-elect-renew-deadline", "renew-deadline", fromComponentBase},
	{"leader-elect-retry-period", "retry-period", fromComponentBase},
}

// newFlagSet registers every flag of the binary on c, with its default, and
// the aliases (hidden, sharing their flag's value). Parse uses it; the
// README test checks the README's tables against it.
func newFlagSet(c *Config) *pflag.FlagSet {
	fs := pflag.NewFlagSet("elector-sidecar", pflag.ContinueOnError)
	// Errors are returned as one line; the usage text only for -h.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.SortFlags = false
	fs.StringVar(&c.LeaseName, "lease-name", "", "name of the coordination.k8s.io/v1 Lease to elect on (required)")
	fs.StringVar(&c.LeaseNamespace, "lease-namespace", "", "namespace of the Lease (default: $POD_NAMESPACE, then the service account's namespace, then \"default\")")
	fs.StringVar(&c.Identity, "identity", "", "this candidate's identity, written as the Lease holder (default: $POD_NAME, then the hostname)")
	fs.DurationVar(&c.LeaseDuration, "lease-duration", election.DefaultLeaseDuration, "how long followers wait after the last observed renewal before taking over")
	fs.DurationVar(&c.RenewDeadline, "renew-deadline", election.DefaultRenewDeadline, "how long the leader retries renewing before it gives up its term")
	fs.DurationVar(&c.RetryPeriod, "retry-period", election.DefaultRetryPeriod, "renew interval of the leader and back-off after failed requests")
	fs.DurationVar(&c.ClockSkewMargin, "clock-skew-margin", election.DefaultClockSkewMargin, "the token stops this long before other candidates could take over")
	fs.StringVar(&c.HTTPAddress, "http-address", "127.0.0.1:4040", "address of the local API (/leader, /token, /release, /healthz, /readyz, /metrics)")
	fs.StringVar(&c.HTTPEndpoint, "http-endpoint", "", "optional diagnostics address that serves only /healthz, /readyz and /metrics, for httpGet probes and Prometheus on the pod IP (e.g. :9090)")
	fs.StringVar(&c.MetricsAddress, "metrics-address", "", "deprecated alias of --http-endpoint")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then in-cluster config)")
	fs.StringVar(&c.LogFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&c.AppHealthURL, "app-health-url", "", "the app's health endpoint, http://127.0.0.1:PORT/PATH (or [::1], localhost); while it fails this pod does not lead (default: off)")
	fs.DurationVar(&c.AppHealthPeriod, "app-health-period", apphealth.DefaultPeriod, "how often the app's health endpoint is probed")
	fs.DurationVar(&c.AppHealthTimeout, "app-health-timeout", apphealth.DefaultTimeout, "how long one app health probe may take; must be < --app-health-period")
	fs.IntVar(&c.AppHealthFailureThreshold, "app-health-failure-threshold", apphealth.DefaultFailureThreshold, "consecutive failed probes that make the app unhealthy (the pod steps down)")
	fs.IntVar(&c.AppHealthSuccessThreshold, "app-health-success-threshold", apphealth.DefaultSuccessThreshold, "consecutive passed probes that make the app healthy (the pod campaigns)")
	fs.StringVar(&c.LeaderLabel, "leader-label", "", "label key (e.g. "+leaderlabel.DefaultKey+") set to \"true\" on this pod (named by --identity, in the Lease namespace) while it leads, for a Service that routes to the leader (default: off)")
	fs.StringVar(&c.LeaderLabelSelector, "leader-label-selector", "", "a label selector of this election's pods (e.g. app.kubernetes.io/instance=billing): a new leader removes --leader-label only from the pods it selects, so two elections in one namespace never strip each other's label (default: every pod of the namespace)")
	fs.StringVar(&c.LeaseLabels, "lease-labels", "", "labels of the Lease, key=value pairs separated by commas (e.g. app.kubernetes.io/instance=billing): set when this sidecar creates the Lease; its next write adds any the Lease lacks, and changes or removes none (default: none)")
	fs.StringVar(&c.ShutdownHandoff, "shutdown-handoff", string(election.HandoffAfterValidity), "on SIGTERM a leader stops its token at once; after-validity: no other pod leads until every token answer already given to the app (expiresInMs) has run out, since nothing guarantees the app stopped using it; immediate: another pod may lead at once, for when the app has exited before the sidecar is stopped (a native sidecar). POST /release is always immediate")
	fs.BoolVar(&c.DirectHandoff, "direct-handoff", true, "announce this candidate on the Lease (one patch when it joins or leaves the election) and, when stepping down as leader, hand the Lease to the most recently announced candidate, which takes it with one write and no race; false: release the Lease free instead")
	fs.IntVar(&c.Shards, "shards", 0, "run a shard set instead of one election: the Leases <lease-name>-0 … <lease-name>-(N-1), spread in fair shares over the pods of the set, each with its own fencing token (GET /shards); raises --kube-api-qps and --kube-api-burst to at least N and 2N; 0: one Lease")
	fs.IntVar(&c.ExpectedCandidates, "expected-candidates", 0, "how many candidates usually run for this Lease (the replica count): after a release the followers spread their writes over a window sized for at least this many (3 or fewer write at once, 100 over ~1 s); 0: unknown (the Lease learns it from its handoffs)")
	fs.Float64Var(&c.KubeAPIQPS, "kube-api-qps", DefaultKubeAPIQPS, "client-side limit on API server requests per second (sustained)")
	fs.IntVar(&c.KubeAPIBurst, "kube-api-burst", DefaultKubeAPIBurst, "client-side limit on API server requests in a burst above --kube-api-qps")
	fs.BoolVar(&c.ShowVersion, "version", false, "print the version and exit")

	for _, a := range Aliases {
		f := fs.Lookup(a.of)
		fs.AddFlag(&pflag.Flag{Name: a.name, Value: f.Value, DefValue: f.DefValue, Hidden: true,
			Usage: "alias of --" + a.of + " (the name " + a.from + " use)"})
	}
	// -h shows each flag's variable and aliases.
	for _, s := range Flags {
		f := fs.Lookup(s.name)
		if names := aliasesOf(s.name); len(names) > 0 {
			f.Usage += " (aliases: --" + strings.Join(names, ", --") + ")"
		}
		f.Usage += " [$" + s.env + "]"
	}
	return fs
}

// aliasesOf returns the aliases of a flag, in the order of Aliases.
func aliasesOf(name string) []string {
	var out []string
	for _, a := range Aliases {
		if a.of == name {
			out = append(out, a.name)
		}
	}
	return out
}

// Parse reads flags (args without the program name) over ELECTOR_* env
// vars over defaults, fills derived defaults, and validates. Errors are
// *UsageError with one line naming the flag, with a hint; flag.ErrHelp
// for -h and --help, after the usage text went to usage.
func Parse(args []string, env Env, usage io.Writer) (*Config, error) {
	c := &Config{}
	fs := newFlagSet(c)
	if err := fs.Parse(posixArgs(fs, args)); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			printUsage(usage, fs)
			return nil, flag.ErrHelp
		}
		return nil, &UsageError{parseError(fs, err)}
	}
	if fs.NArg() > 0 {
		return nil, &UsageError{fmt.Errorf("unexpected argument %q: all settings are --flags (elector-sidecar --help lists them)", fs.Arg(0))}
	}
	if err := checkAliases(fs); err != nil {
		return nil, &UsageError{err}
	}
	// The environment for every flag the command line left alone.
	if err := applyEnv(fs, env); err != nil {
		return nil, &UsageError{err}
	}
	if c.ShowVersion {
		return c, nil
	}
	c.fillDefaults(env)
	if err := c.Validate(); err != nil {
		return nil, &UsageError{err}
	}
	return c, nil
}

func printUsage(w io.Writer, fs *pflag.FlagSet) {
	if w == nil {
		return
	}
	fmt.Fprintf(w, "Usage: elector-sidecar [flags]\n       elector-sidecar probe [PATH]\n\n"+
		"Every flag can also be set with the environment variable in brackets; a flag on the command line wins.\n\nFlags:\n")
	fmt.Fprint(w, fs.FlagUsages())
}

// posixArgs returns args with every single-dash long flag (-lease-name)
// given two dashes, as the flag package of earlier versions accepted it:
// the binary has no one-letter flags, so "-name" can only mean "--name".
// Values after a flag that takes one, "-h" and everything after "--" are
// left as they are. Warnings reports each one.
func posixArgs(fs *pflag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		if singleDashLong(a) {
			a = "-" + a
		}
		out = append(out, a)
		// "--flag value": the next argument is a value, whatever it looks like.
		if name, ok := strings.CutPrefix(a, "--"); ok && !strings.Contains(name, "=") && i+1 < len(args) {
			if f := fs.Lookup(name); f != nil && f.NoOptDefVal == "" {
				out = append(out, args[i+1])
				i++
			}
		}
	}
	return out
}

func singleDashLong(a string) bool {
	return len(a) > 2 && a[0] == '-' && a[1] != '-'
}

// checkAliases refuses a setting given twice under different names.
func checkAliases(fs *pflag.FlagSet) error {
	for _, s := range Flags {
		var given []string
		for _, name := range append([]string{s.name}, aliasesOf(s.name)...) {
			if fs.Changed(name) {
				given = append(given, "--"+name)
			}
		}
		if len(given) > 1 {
			return fmt.Errorf("%s: one setting given twice (the first is its flag, the others its aliases); set only --%s", strings.Join(given, " and "), s.name)
		}
	}
	return nil
}

// parseError words a command-line error as one line with a hint.
func parseError(fs *pflag.FlagSet, err error) error {
	var (
		notExist *pflag.NotExistError
		required *pflag.ValueRequiredError
		invalid  *pflag.InvalidValueError
		syntax   *pflag.InvalidSyntaxError
	)
	switch {
	case errors.As(err, &notExist):
		if short := notExist.GetSpecifiedShortnames(); short != "" {
			return fmt.Errorf("unknown flag -%s: flags have two dashes and no one-letter forms (elector-sidecar --help lists them)", short)
		}
		name := notExist.GetSpecifiedName()
		hint := "elector-sidecar --help lists every flag"
		if m := closest(name, flagNames(fs)); m != "" {
			hint = "did you mean --" + m + "? " + hint
		}
		return fmt.Errorf("unknown flag --%s: %s", name, hint)
	case errors.As(err, &required):
		name := required.GetFlag().Name
		return fmt.Errorf("--%s needs a value: --%s=%s", name, name, example(required.GetFlag()))
	case errors.As(err, &invalid):
		return fmt.Errorf("invalid value %q for %s: %s", invalid.GetValue(), flagTitle(invalid.GetFlag().Name), hintFor(invalid.GetFlag()))
	case errors.As(err, &syntax):
		return fmt.Errorf("bad flag syntax %s: want --flag=value or --flag value", syntax.GetSpecifiedFlag())
	}
	return err
}

// flagTitle names a flag in an error: an alias with the flag it stands for.
func flagTitle(name string) string {
	for _, a := range Aliases {
		if a.name == name {
			return "--" + name + " (alias of --" + a.of + ")"
		}
	}
	return "--" + name
}

// hintFor says what a flag's value should look like.
func hintFor(f *pflag.Flag) string {
	switch f.Value.Type() {
	case "duration":
		return "want a duration like " + example(f) + " (a number with a unit: ms, s, m, h)"
	case "int":
		return "want a whole number like " + example(f)
	case "float64":
		return "want a number like " + example(f)
	case "bool":
		return "want true or false"
	}
	return "see elector-sidecar --help"
}

// example is a value of the flag's type: its default, if it has one.
func example(f *pflag.Flag) string {
	switch {
	case f.Value.Type() == "duration" && f.DefValue == "0s":
		return "15s"
	case f.DefValue != "":
		return f.DefValue
	}
	return "VALUE"
}

// flagNames lists every flag and alias name, sorted.
func flagNames(fs *pflag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
	sort.Strings(names)
	return names
}
