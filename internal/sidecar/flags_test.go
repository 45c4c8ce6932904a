package sidecar

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestLeaseDurationWithoutUnitNamesTheFlagAndHints: the issue's own case,
// --lease-duration=15, is one line with two dashes and the form it wants.
func TestLeaseDurationWithoutUnitNamesTheFlagAndHints(t *testing.T) {
	_, err := Parse([]string{"--lease-name=l", "--lease-duration=15"}, testEnv(nil, "", "h"), nil)
	want := `invalid value "15" for --lease-duration: want a duration like 15s (a number with a unit: ms, s, m, h)`
	var ue *UsageError
	if !errors.As(err, &ue) || err.Error() != want {
		t.Fatalf("Parse error %v, want %q", err, want)
	}
}

// TestUsageErrorHints: every kind of command-line mistake gets a hint.
func TestUsageErrorHints(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--lease-name"}, "--lease-name needs a value: --lease-name=VALUE"},
		{[]string{"--lease-name=l", "--retry-period"}, "--retry-period needs a value: --retry-period=2s"},
		{[]string{"--lease-name=l", "--leader-elect-lease-duration=15"}, `invalid value "15" for --leader-elect-lease-duration (alias of --lease-duration): want a duration like 15s`},
		{[]string{"--lease-name=l", "--kube-api-qps=fast"}, `invalid value "fast" for --kube-api-qps: want a number like 50`},
		{[]string{"--lease-name=l", "--version=maybe"}, `invalid value "maybe" for --version: want true or false`},
		{[]string{"--lease-name=l", "--lease-durtion=15s"}, "unknown flag --lease-durtion: did you mean --lease-duration? elector-sidecar --help lists every flag"},
		{[]string{"--lease-name=l", "--zzz=1"}, "unknown flag --zzz: elector-sidecar --help lists every flag"},
		{[]string{"--lease-name=l", "-x"}, "unknown flag -x: flags have two dashes and no one-letter forms"},
	} {
		_, err := Parse(tt.args, testEnv(nil, "", "h"), nil)
		var ue *UsageError
		if !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("Parse(%q) error %v, want one starting with %q", tt.args, err, tt.want)
		}
	}
}

// TestAliasesSetTheirFlag: each alias of the CSI sidecars and of
// component-base sets exactly what its flag sets.
func TestAliasesSetTheirFlag(t *testing.T) {
	values := map[string]string{"lease-name": "billing", "lease-namespace": "team", "lease-duration": "20s", "renew-deadline": "12s", "retry-period": "3s"}
	for _, a := range Aliases {
		v, ok := values[a.of]
		if !ok {
			t.Fatalf("no test value for --%s (alias --%s)", a.of, a.name)
		}
		base := []string{"--lease-name=l"}
		if a.of == "lease-name" {
			base = nil
		}
		viaFlag, err := Parse(append(slices.Clone(base), "--"+a.of+"="+v), testEnv(nil, "", "h"), nil)
		if err != nil {
			t.Fatalf("--%s=%s: %v", a.of, v, err)
		}
		viaAlias, err := Parse(append(slices.Clone(base), "--"+a.name+"="+v), testEnv(nil, "", "h"), nil)
		if err != nil {
			t.Fatalf("--%s=%s: %v", a.name, v, err)
		}
		if !reflect.DeepEqual(viaFlag, viaAlias) {
			t.Errorf("--%s=%s gives %+v, --%s=%s gives %+v", a.name, v, *viaAlias, a.of, v, *viaFlag)
		}
		if *viaAlias == (Config{}) || viaAlias.LeaseDuration == 0 {
			t.Fatalf("empty config from --%s", a.name)
		}
	}
}

// TestAliasAndFlagTogetherAreAnError: one setting under two names is a
// usage error naming both, as are two aliases of one flag.
func TestAliasAndFlagTogetherAreAnError(t *testing.T) {
	for _, args := range [][]string{
		{"--lease-name=l", "--lease-duration=20s", "--leader-elect-lease-duration=20s"},
		{"--lease-name=l", "--leader-election-namespace=a", "--leader-elect-resource-namespace=a"},
	} {
		_, err := Parse(args, testEnv(nil, "", "h"), nil)
		var ue *UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "one setting given twice") {
			t.Errorf("Parse(%q) = %v, want a usage error about one setting given twice", args, err)
			continue
		}
		for _, a := range args[1:] {
			name, _, _ := strings.Cut(a, "=")
			if !strings.Contains(err.Error(), name) {
				t.Errorf("error %q does not name %s", err, name)
			}
		}
	}
}

// TestAliasOnTheCommandLineBeatsTheVariable: as for the flag itself.
func TestAliasOnTheCommandLineBeatsTheVariable(t *testing.T) {
	c, err := Parse([]string{"--lease-name=l", "--leader-election-lease-duration=20s"},
		testEnv(map[string]string{"ELECTOR_LEASE_DURATION": "30s"}, "", "h"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.LeaseDuration != 20*time.Second {
		t.Fatalf("lease duration %v, want the alias's 20s", c.LeaseDuration)
	}
}

// TestSingleDashFlagsWorkWithAWarning: -lease-name (the flag package's
// form, accepted before) still works, and Warnings says to use two dashes;
// a value that starts with a dash is left alone.
func TestSingleDashFlagsWorkWithAWarning(t *testing.T) {
	args := []string{"-lease-name=l", "-identity", "-me", "-log-level=debug"}
	c, err := Parse(args, testEnv(nil, "", "h"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.LeaseName != "l" || c.Identity != "-me" || c.LogLevel != "debug" {
		t.Fatalf("config %+v", *c)
	}
	got := Warnings(args, testEnv(nil, "", "h"))
	want := []string{
		"-lease-name: single-dash flags are deprecated; use --lease-name",
		"-identity: single-dash flags are deprecated; use --identity",
		"-log-level: single-dash flags are deprecated; use --log-level",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Warnings = %q, want %q", got, want)
	}
	if w := Warnings([]string{"--lease-name=l", "--", "-x"}, testEnv(nil, "", "h")); len(w) != 0 {
		t.Errorf("Warnings for double-dash flags: %q", w)
	}
}

// TestUnknownElectorVariablesAreWarned: a misspelt ELECTOR_* variable is no
// longer ignored silently; the closest known name is suggested.
func TestUnknownElectorVariablesAreWarned(t *testing.T) {
	env := testEnv(nil, "", "h")
	env.Environ = func() []string {
		return []string{"PATH=/bin", "ELECTOR_LEASE_DURATON=20s", "ELECTOR_LEASE_NAME=l", "ELECTOR_URL=http://127.0.0.1:4040", "ELECTOR_SOMETHING_ELSE=1"}
	}
	got := Warnings(nil, env)
	want := []string{
		"ELECTOR_LEASE_DURATON is set but no flag reads it: it is ignored; did you mean ELECTOR_LEASE_DURATION?",
		"ELECTOR_SOMETHING_ELSE is set but no flag reads it: it is ignored",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Warnings = %q, want %q", got, want)
	}
}

func TestEditDistance(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"a", "", 1}, {"kitten", "sitting", 3}, {"lease-durtion", "lease-duration", 1}, {"abc", "abc", 0}} {
		if got := editDistance(tt.a, tt.b); got != tt.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.d)
		}
	}
}
