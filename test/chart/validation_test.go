package chart

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
)

// timingValues are the chart's four election values, in the order the sidecar parses and checks them.
var timingValues = []struct{ value, flag, env string }{
	{"leaseDuration", "lease-duration", "ELECTOR_LEASE_DURATION"},
	{"renewDeadline", "renew-deadline", "ELECTOR_RENEW_DEADLINE"},
	{"retryPeriod", "retry-period", "ELECTOR_RETRY_PERIOD"},
	{"clockSkewMargin", "clock-skew-margin", "ELECTOR_CLOCK_SKEW_MARGIN"},
}

var (
	chartTimingRE  = regexp.MustCompile(`election[./](leaseDuration|renewDeadline|retryPeriod|clockSkewMargin)`)
	binaryTimingRE = regexp.MustCompile(`-(lease-duration|renew-deadline|retry-period|clock-skew-margin)`)
)

// sidecarVerdict runs the sidecar binary with the four timings as flags (and everything else it needs,
// with a kubeconfig that does not exist). It returns "" when the flags pass validation (the binary gets
// as far as loading the kubeconfig and exits 1), else the flag its one-line error names (exit 2).
func sidecarVerdict(t *testing.T, bin string, timings [4]string) (badFlag, msg string) {
	t.Helper()
	missing := filepath.Join(t.TempDir(), "no-such-kubeconfig")
	args := []string{"--lease-name=timings", "--lease-namespace=ns", "--identity=pod-0", "--kubeconfig=" + missing}
	for i, v := range timingValues {
		args = append(args, "--"+v.flag+"="+timings[i])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = []string{} // no ELECTOR_*, POD_* or KUBECONFIG from the test's environment
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("elector-sidecar %v: %v (want exit 1 or 2)\n%s", args, err, stderr.String())
	}
	out := strings.TrimSpace(stderr.String())
	switch exit.ExitCode() {
	case 1:
		// Validation passed: Run failed on the missing kubeconfig.
		if !strings.Contains(out, "loading kubernetes client config") || !strings.Contains(out, missing) {
			t.Fatalf("elector-sidecar %v exited 1 for another reason than the kubeconfig:\n%s", args, out)
		}
		return "", ""
	case 2:
		if strings.Count(out, "\n") != 0 || !strings.HasPrefix(out, "elector-sidecar: ") {
			t.Fatalf("elector-sidecar %v: exit 2 without a one-line reason:\n%s", args, out)
		}
		m := binaryTimingRE.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("elector-sidecar %v: error names no timing flag: %s", args, out)
		}
		return m[1], out
	}
	t.Fatalf("elector-sidecar %v: exit %d, want 1 or 2\n%s", args, exit.ExitCode(), out)
	return "", ""
}

// chartVerdict renders chart c (nil: this checkout's) with the four timings. It returns "" when it renders (and checks that
// the sidecar gets exactly these strings), else the value its error names.
func chartVerdict(t *testing.T, c *chartv2.Chart, timings [4]string) (badValue, msg string) {
	t.Helper()
	var set []string
	for i, v := range timingValues {
		set = append(set, "election."+v.value+"="+timings[i])
	}
	r, err := render(t, renderOpts{Set: set, Chart: c})
	if err != nil {
		m := chartTimingRE.FindStringSubmatch(err.Error())
		if m == nil {
			t.Fatalf("render %v: error names no election timing: %v", set, err)
		}
		return m[1], err.Error()
	}
	sidecar, _ := sidecarAndApp(t, r, "app")
	env := envMap(sidecar)
	for i, v := range timingValues {
		if env[v.env] != timings[i] {
			t.Errorf("rendered %s = %q, want %q", v.env, env[v.env], timings[i])
		}
	}
	return "", ""
}

const timingsValid = "" // want: both accept

// timingTable: election timings and the value both the chart and the sidecar must reject ("" = both
// accept), from the rules of pkg/election Config.Validate.
var timingTable = []struct {
	name    string
	timings [4]string // leaseDuration, renewDeadline, retryPeriod, clockSkewMargin
	want    string    // the value both must reject, or timingsValid
}{
	{"defaults", [4]string{"15s", "10s", "2s", "500ms"}, timingsValid},

	// leaseDuration >= 1s (the Lease stores whole seconds).
	{"sub-second lease (issue 15)", [4]string{"900ms", "600ms", "200ms", "100ms"}, "leaseDuration"},
	{"lease 1ms under 1s", [4]string{"999ms", "600ms", "200ms", "100ms"}, "leaseDuration"},
	{"lease 1ns under 1s", [4]string{"999999999ns", "600ms", "200ms", "100ms"}, "leaseDuration"},
	{"lease exactly 1s", [4]string{"1s", "600ms", "200ms", "100ms"}, timingsValid},
	{"lease 1ms over 1s", [4]string{"1001ms", "600ms", "200ms", "100ms"}, timingsValid},
	{"lease 0", [4]string{"0", "600ms", "200ms", "100ms"}, "leaseDuration"},
	{"lease 0s", [4]string{"0s", "600ms", "200ms", "100ms"}, "leaseDuration"},
	{"lease negative", [4]string{"-15s", "10s", "2s", "500ms"}, "leaseDuration"},
	// leaseDuration <= int32 seconds.
	{"lease at the int32 seconds maximum", [4]string{"2147483647s", "10s", "2s", "500ms"}, timingsValid},
	{"lease at the maximum, as Go prints it", [4]string{"596523h14m7s", "10s", "2s", "500ms"}, timingsValid},
	{"lease 1s over the maximum", [4]string{"2147483648s", "10s", "2s", "500ms"}, "leaseDuration"},
	{"lease 1ns over the maximum", [4]string{"2147483647000000001ns", "10s", "2s", "500ms"}, "leaseDuration"},
	{"lease the largest duration", [4]string{"9223372036854775807ns", "10s", "2s", "500ms"}, "leaseDuration"},

	// leaseDuration > renewDeadline.
	{"lease equal to renew", [4]string{"15s", "15s", "2s", "500ms"}, "leaseDuration"},
	{"lease 1ms under renew", [4]string{"14999ms", "15s", "2s", "500ms"}, "leaseDuration"},
	{"lease 1ms over renew", [4]string{"15001ms", "15s", "2s", "500ms"}, timingsValid},
	{"lease 1ns over renew", [4]string{"15000000001ns", "15s", "2s", "500ms"}, timingsValid},
	{"renew longer than lease", [4]string{"5s", "6000ms", "2s", "500ms"}, "leaseDuration"},

	// renewDeadline > 0 and > 1.2 x retryPeriod.
	{"renew 0", [4]string{"15s", "0", "2s", "500ms"}, "renewDeadline"},
	{"renew 0s", [4]string{"15s", "0s", "2s", "500ms"}, "renewDeadline"},
	{"renew negative", [4]string{"15s", "-1s", "2s", "500ms"}, "renewDeadline"},
	{"renew exactly 1.2 x retry", [4]string{"15s", "6s", "5s", "500ms"}, "renewDeadline"},
	{"renew 1ms under 1.2 x retry", [4]string{"15s", "5999ms", "5s", "500ms"}, "renewDeadline"},
	{"renew 1ms over 1.2 x retry", [4]string{"15s", "6001ms", "5s", "500ms"}, timingsValid},
	{"renew 1ns over 1.2 x retry", [4]string{"15s", "6000000001ns", "5s", "500ms"}, timingsValid},
	{"renew equal to retry", [4]string{"15s", "2s", "2s", "500ms"}, "renewDeadline"},
	{"1.2 x retry not whole: renew just over", [4]string{"15s", "8ns", "6ns", "500ms"}, timingsValid}, // 1.2 x 6ns = 7.2ns
	{"1.2 x retry not whole: renew just under", [4]string{"15s", "7ns", "6ns", "500ms"}, "renewDeadline"},

	// retryPeriod > 0.
	{"retry 0", [4]string{"15s", "10s", "0", "500ms"}, "retryPeriod"},
	{"retry 0s", [4]string{"15s", "10s", "0s", "500ms"}, "retryPeriod"},
	{"retry 0ms", [4]string{"15s", "10s", "0ms", "500ms"}, "retryPeriod"},
	{"retry negative", [4]string{"15s", "10s", "-2s", "500ms"}, "retryPeriod"},
	{"retry 1ns", [4]string{"15s", "10s", "1ns", "500ms"}, timingsValid},
	{"retry 0 is reported before a sub-second lease", [4]string{"900ms", "600ms", "0s", "100ms"}, "retryPeriod"},

	// 0 <= clockSkewMargin < leaseDuration - retryPeriod (13s with the defaults).
	{"skew 0", [4]string{"15s", "10s", "2s", "0"}, timingsValid},
	{"skew 0s", [4]string{"15s", "10s", "2s", "0s"}, timingsValid},
	{"skew negative", [4]string{"15s", "10s", "2s", "-1ms"}, "clockSkewMargin"},
	{"skew equal to renew", [4]string{"15s", "10s", "2s", "10s"}, timingsValid},
	{"skew between renew and lease - retry", [4]string{"15s", "10s", "2s", "12s"}, timingsValid},
	{"skew 1ms under lease - retry", [4]string{"15s", "10s", "2s", "12999ms"}, timingsValid},
	{"skew 1ns under lease - retry", [4]string{"15s", "10s", "2s", "12999999999ns"}, timingsValid},
	{"skew equal to lease - retry", [4]string{"15s", "10s", "2s", "13s"}, "clockSkewMargin"},
	{"skew 1ms over lease - retry", [4]string{"15s", "10s", "2s", "13001ms"}, "clockSkewMargin"},
	{"skew equal to lease", [4]string{"15s", "10s", "2s", "15s"}, "clockSkewMargin"},
	{"tight: 1s lease, skew just under lease - retry", [4]string{"1s", "900ms", "200ms", "799ms"}, timingsValid},
	{"tight: 1s lease, skew at lease - retry", [4]string{"1s", "900ms", "200ms", "800ms"}, "clockSkewMargin"},

	// The duration syntax of the flags (Go's time.ParseDuration).
	{"fractions", [4]string{"1.5s", "1.2s", "0.5s", ".25s"}, timingsValid},
	{"fraction at the 1.2 x boundary", [4]string{"15s", "6.000000001s", "5s", "500ms"}, timingsValid},
	{"fraction finer than 1ns under 1s", [4]string{"0.9999999999s", "600ms", "200ms", "100ms"}, "leaseDuration"},
	{"fraction finer than 1ns over 1s", [4]string{"1.0000000001s", "600ms", "200ms", "100ms"}, timingsValid},
	{"fraction with no digits after the dot", [4]string{"15.s", "10s", "2s", "500ms"}, timingsValid},
	{"compound durations", [4]string{"1m30s", "1m0.5s", "2s500ms", "1s1ms1us1ns"}, timingsValid},
	{"fractional minutes and hours", [4]string{"0.5h", "1.5m", "0.1m", "0.001h"}, timingsValid},
	{"micro- and nanoseconds", [4]string{"15000000us", "10000000µs", "2000000μs", "500000000ns"}, timingsValid},
	{"plus sign", [4]string{"+15s", "+10s", "+2s", "+500ms"}, timingsValid},
	{"leading zeros", [4]string{"015s", "010s", "02s", "0500ms"}, timingsValid},
	{"many leading zeros", [4]string{"0000000000000000000000015s", "10s", "2s", "500ms"}, timingsValid},
	{"largest duration, as Go prints it", [4]string{"15s", "10s", "2s", "2562047h47m16.854775807s"}, "clockSkewMargin"},

	// Not durations: both reject the value (first of the four that is bad).
	{"no unit", [4]string{"15", "10s", "2s", "500ms"}, "leaseDuration"},
	{"no unit on 0.5", [4]string{"15s", "10s", "0.5", "500ms"}, "retryPeriod"},
	{"double zero without a unit", [4]string{"15s", "10s", "2s", "00"}, "clockSkewMargin"},
	{"empty", [4]string{"", "10s", "2s", "500ms"}, "leaseDuration"},
	{"unknown unit", [4]string{"15s", "10sec", "2s", "500ms"}, "renewDeadline"},
	{"days", [4]string{"1d", "10s", "2s", "500ms"}, "leaseDuration"},
	{"upper-case unit", [4]string{"15S", "10s", "2s", "500ms"}, "leaseDuration"},
	{"space before the unit", [4]string{"15s", "10 s", "2s", "500ms"}, "renewDeadline"},
	{"trailing space", [4]string{"15s", "10s", "2s ", "500ms"}, "retryPeriod"},
	{"number without a unit after a unit", [4]string{"1h30", "10s", "2s", "500ms"}, "leaseDuration"},
	{"two dots", [4]string{"15s", "10s", "1.5.5s", "500ms"}, "retryPeriod"},
	{"a dot alone", [4]string{"15s", "10s", "2s", ".s"}, "clockSkewMargin"},
	{"sign alone", [4]string{"15s", "10s", "2s", "-"}, "clockSkewMargin"},
	{"two signs", [4]string{"15s", "10s", "2s", "--1s"}, "clockSkewMargin"},
	{"hex", [4]string{"0x10s", "10s", "2s", "500ms"}, "leaseDuration"},
	{"underscore", [4]string{"15s", "10s", "2s", "1_000ms"}, "clockSkewMargin"},
	{"words", [4]string{"15s", "ten seconds", "2s", "500ms"}, "renewDeadline"},
	{"overflows int64 nanoseconds", [4]string{"15s", "10s", "2s", "9223372036854775808ns"}, "clockSkewMargin"},
	{"overflows in the unit", [4]string{"15s", "10s", "2s", "2562048h"}, "clockSkewMargin"},
	{"overflows in the fraction", [4]string{"15s", "10s", "2s", "2562047h47m16.854775808s"}, "clockSkewMargin"},
	{"more digits than int64", [4]string{"15s", "10s", "2s", "99999999999999999999ms"}, "clockSkewMargin"},
	{"a bad string is reported before a bad rule", [4]string{"900ms", "10s", "2s", "soon"}, "clockSkewMargin"},
}

// TestChartAndBinaryAgreeOnTimings: the chart renders a set of election timings exactly when the sidecar
// binary accepts the same strings as flags, and when both reject one, they blame the same value. So a
// release that renders never has sidecars that exit 2 in every pod, and the chart rejects nothing the
// sidecar would run with. The table walks every rule of pkg/election Config.Validate at its boundary
// (equal, 1ms and 1ns on either side), the duration syntax of Go's time.ParseDuration that the flags
// take, and strings that are not durations.
func TestChartAndBinaryAgreeOnTimings(t *testing.T) {
	bin := buildSidecar(t) // ./cmd/elector-sidecar of this checkout, or $ELECTOR_SIDECAR_BIN
	for _, tt := range timingTable {
		t.Run(tt.name, func(t *testing.T) {
			chartBad, chartMsg := chartVerdict(t, nil, tt.timings)
			binBad, binMsg := sidecarVerdict(t, bin, tt.timings)
			binValue := ""
			for _, v := range timingValues {
				if v.flag == binBad {
					binValue = v.value
				}
			}
			if chartBad != binValue {
				t.Errorf("%q: the chart and the sidecar disagree\nchart:   %s\nsidecar: %s", tt.timings,
					cmp.Or(chartMsg, "renders"), cmp.Or(binMsg, "starts (fails only on the missing kubeconfig)"))
			}
			if chartBad != tt.want || binValue != tt.want {
				t.Errorf("%q: chart blames %q, sidecar %q; want %q (\"\" = valid)\nchart:   %s\nsidecar: %s", tt.timings,
					chartBad, binValue, tt.want, chartMsg, binMsg)
			}
		})
	}
}
