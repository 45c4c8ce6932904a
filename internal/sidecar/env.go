package sidecar

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// Env abstracts the process environment for tests.
type Env struct {
	Getenv   func(string) string
	ReadFile func(string) ([]byte, error)
	Hostname func() (string, error)
	// Environ lists the environment as KEY=VALUE (nil: none), for the
	// warning about ELECTOR_* variables that no flag reads.
	Environ func() []string
}

// OSEnv is the real environment.
var OSEnv = Env{Getenv: os.Getenv, ReadFile: os.ReadFile, Hostname: os.Hostname, Environ: os.Environ}

// ServiceAccountNamespaceFile is where a pod finds its namespace.
const ServiceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// otherEnv are ELECTOR_* variables that other programs read, not this
// binary's flags: no warning for them.
var otherEnv = map[string]bool{
	"ELECTOR_URL": true, // the app's client (pkg/client) finds the local API there
}

func lookup(env Env, key string) (string, bool) {
	v := env.Getenv(key)
	return v, v != ""
}

// applyEnv sets every flag that the command line left alone (under its
// name or an alias) from its ELECTOR_* variable, if that is set.
func applyEnv(fs *pflag.FlagSet, env Env) error {
	for _, f := range Flags {
		if fs.Changed(f.name) || anyAliasChanged(fs, f.name) {
			continue
		}
		v, ok := lookup(env, f.env)
		if !ok {
			continue
		}
		if err := fs.Set(f.name, v); err != nil {
			return fmt.Errorf("invalid value %q for %s (--%s): %s", v, f.env, f.name, hintFor(fs.Lookup(f.name)))
		}
	}
	return nil
}

func anyAliasChanged(fs *pflag.FlagSet, name string) bool {
	for _, a := range aliasesOf(name) {
		if fs.Changed(a) {
			return true
		}
	}
	return false
}

func (c *Config) fillDefaults(env Env) {
	if c.LeaseNamespace == "" {
		c.LeaseNamespace = env.Getenv("POD_NAMESPACE")
	}
	if c.LeaseNamespace == "" && env.ReadFile != nil {
		if b, err := env.ReadFile(ServiceAccountNamespaceFile); err == nil {
			c.LeaseNamespace = strings.TrimSpace(string(b))
		}
	}
	if c.LeaseNamespace == "" {
		c.LeaseNamespace = "default"
	}
	if c.Identity == "" {
		c.Identity = env.Getenv("POD_NAME")
	}
	if c.Identity == "" && env.Hostname != nil {
		if h, err := env.Hostname(); err == nil {
			c.Identity = h
		}
	}
	if c.Kubeconfig == "" {
		c.Kubeconfig = env.Getenv("KUBECONFIG")
	}
}

// Warnings returns what the command line and the environment do that
// works but is probably a mistake, for the log: every ELECTOR_* variable
// no flag reads (a misspelt one is otherwise ignored silently; with the
// closest known name, if one is close), and every single-dash flag
// (-lease-name: accepted, but the flags are --flags now).
func Warnings(args []string, env Env) []string {
	var out []string
	fs := newFlagSet(&Config{})
	for i, a := range posixArgs(fs, args) {
		if a == "--" {
			break
		}
		if i < len(args) && singleDashLong(args[i]) && a == "-"+args[i] {
			name, _, _ := strings.Cut(a[2:], "=")
			out = append(out, fmt.Sprintf("-%s: single-dash flags are deprecated; use --%s", name, name))
		}
	}
	if env.Environ == nil {
		return out
	}
	known := map[string]bool{}
	var names []string
	for _, f := range Flags {
		known[f.env] = true
		names = append(names, f.env)
	}
	for _, kv := range env.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "ELECTOR_") || known[k] || otherEnv[k] {
			continue
		}
		msg := k + " is set but no flag reads it: it is ignored"
		if m := closest(k, names); m != "" {
			msg += "; did you mean " + m + "?"
		}
		out = append(out, msg)
	}
	return out
}

// closest returns the candidate nearest to s by edit distance, if it is
// near enough to be a misspelling (at most 2 edits, or 3 for long names);
// "" otherwise.
func closest(s string, candidates []string) string {
	best, bestD := "", -1
	for _, c := range candidates {
		if d := editDistance(s, c); bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	limit := 2
	if len(s) >= 12 {
		limit = 3
	}
	if bestD < 0 || bestD > limit {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance of a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
