package chart

import (
	"strings"
	"testing"
)

// TestBadValues: impossible or mistyped values fail at render time, with a message that names the value.
func TestBadValues(t *testing.T) {
	tests := []struct {
		name        string
		set         []string
		kubeVersion string
		want        []string // all must appear in the error
	}{
		// The timing rules at every boundary, against the sidecar binary: validation_test.go.
		{"renewDeadline equal to leaseDuration", []string{"election.renewDeadline=15s"},
			"", []string{"election.leaseDuration (15s): must be greater than election.renewDeadline (15s)"}},
		{"renewDeadline longer than leaseDuration", []string{"election.leaseDuration=5s", "election.renewDeadline=6000ms"},
			"", []string{"election.leaseDuration (5s): must be greater than election.renewDeadline (6000ms)"}},
		{"retryPeriod too long for renewDeadline", []string{"election.retryPeriod=9s"},
			"", []string{"election.renewDeadline (10s): must be greater than 1.2 x election.retryPeriod (9s)"}},
		{"clockSkewMargin not below leaseDuration - retryPeriod", []string{"election.clockSkewMargin=13s"},
			"", []string{"election.clockSkewMargin (13s): must be less than election.leaseDuration minus election.retryPeriod (15s - 2s)"}},
		{"sub-second leaseDuration", []string{"election.leaseDuration=900ms", "election.renewDeadline=600ms", "election.retryPeriod=200ms", "election.clockSkewMargin=100ms"},
			"", []string{"election.leaseDuration (900ms): must be at least 1s (the Lease stores whole seconds)"}},
		{"duration without unit", []string{"election.leaseDuration=15"},
			"", []string{`election.leaseDuration: "15" is not a duration: use a number with a unit, e.g. 15s or 500ms`}},
		{"duration with an unknown unit", []string{"election.retryPeriod=2sec"},
			"", []string{"retryPeriod", "does not match pattern"}},
		{"typo in a value name", []string{"election.leaseDurration=20s"},
			"", []string{"leaseDurration", "additional properties"}},
		{"unknown workload kind", []string{"workload.kind=DaemonSet"},
			"", []string{"/workload/kind", "must be one of 'Deployment', 'StatefulSet'"}},
		{"unknown probe mode", []string{"sidecar.probes.mode=tcp"},
			"", []string{"/sidecar/probes/mode", "must be one of 'exec', 'http', 'none'"}},
		{"own app without an image", []string{"demo.enabled=false"},
			"", []string{"app.image.repository is required when demo.enabled is false"}},
		{"metrics on the API port", []string{"metrics.port=4040"},
			"", []string{"metrics.port and sidecar.httpPort are both 4040"}},
		{"invalid lease name", []string{"election.leaseName=My_Lease"},
			"", []string{"leaseName", "My_Lease"}},
		{"port out of range", []string{"sidecar.httpPort=70000"},
			"", []string{"/sidecar/httpPort", "maximum"}},
		{"app health timeout not below period", []string{"appHealth.enabled=true", "appHealth.timeout=2s"},
			"", []string{"appHealth.timeout (2s) must be greater than 0 and shorter than appHealth.period (2s)"}},
		{"app health zero timeout", []string{"appHealth.enabled=true", "appHealth.timeout=0s"},
			"", []string{"appHealth.timeout (0s) must be greater than 0"}},
		{"app health period without unit", []string{"appHealth.enabled=true", "appHealth.period=2"},
			"", []string{`appHealth.period: "2" is not a duration`}},
		{"app health fractional timeout", []string{"appHealth.timeout=0.5s"},
			"", []string{"/appHealth/timeout", "does not match pattern"}},
		{"app health zero failure threshold", []string{"appHealth.enabled=true", "appHealth.failureThreshold=0"},
			"", []string{"/appHealth/failureThreshold", "minimum"}},
		{"app health zero success threshold", []string{"appHealth.successThreshold=0"},
			"", []string{"/appHealth/successThreshold", "minimum"}},
		{"app health relative path", []string{"appHealth.enabled=true", "appHealth.path=healthz"},
			"", []string{"/appHealth/path", "does not match pattern"}},
		{"app health port out of range", []string{"appHealth.port=70000"},
			"", []string{"/appHealth/port", "maximum"}},
		{"app health on an app without a port", []string{"demo.enabled=false", "app.image.repository=r/app", "appHealth.enabled=true"},
			"", []string{"appHealth.port is required with appHealth.enabled"}},
		{"app health in dependency mode without a port", []string{"workload.enabled=false", "appHealth.enabled=true"},
			"", []string{"appHealth.port is required with appHealth.enabled"}},
		{"typo in an app health value", []string{"appHealth.failureTreshold=2"},
			"", []string{"failureTreshold", "additional properties"}},
		{"lease guard on a cluster without VAP v1", nil,
			"v1.29.5", []string{"leaseGuard.enabled=true needs Kubernetes >= 1.30", "set leaseGuard.enabled=false"}},
		{"cluster older than the chart", []string{"sidecar.native=false", "leaseGuard.enabled=false"},
			"v1.28.0", []string{"kubeVersion", ">=1.29.0-0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := render(t, renderOpts{Set: tt.set, KubeVersion: tt.kubeVersion})
			if err == nil {
				t.Fatalf("render succeeded, want an error containing %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
		})
	}

	// Tight but valid timings render (the checks are not too strict).
	for _, set := range [][]string{
		{"election.leaseDuration=5s", "election.renewDeadline=4s", "election.retryPeriod=1s", "election.clockSkewMargin=200ms"},
		{"election.leaseDuration=3s", "election.renewDeadline=2s", "election.retryPeriod=500ms", "election.clockSkewMargin=200ms"},
		{"election.leaseDuration=1m", "election.renewDeadline=40s", "election.retryPeriod=5s"},
	} {
		if _, err := render(t, renderOpts{Set: set}); err != nil {
			t.Errorf("%v: %v", set, err)
		}
	}
	// Without the guard, Kubernetes 1.29 is enough.
	if _, err := render(t, renderOpts{Set: []string{"leaseGuard.enabled=false"}, KubeVersion: "v1.29.0"}); err != nil {
		t.Errorf("1.29 without the guard: %v", err)
	}
}
