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
			"", []string{`sidecar.probes.mode "tcp": must be httpGet, exec or none`}},
		{"probe mode http, removed: it bound the local API to 0.0.0.0", []string{"sidecar.probes.mode=http"},
			"", []string{"sidecar.probes.mode=http was removed", "bound the local API (/token, POST /release) to 0.0.0.0", "Use sidecar.probes.mode=httpGet", "or exec"}},
		{"probe mode http, removed, also in dependency mode", []string{"workload.enabled=false", "sidecar.probes.mode=http"},
			"", []string{"sidecar.probes.mode=http was removed"}},
		{"httpGet probes without the diagnostics port", []string{"metrics.enabled=false"},
			"", []string{"sidecar.probes.mode=httpGet probes the diagnostics port (metrics.port), which metrics.enabled=false turns off", "sidecar.probes.mode=exec"}},
		{"httpGet probes without the diagnostics port, as a plain container", []string{"sidecar.native=false", "sidecar.probes.mode=httpGet", "metrics.enabled=false"},
			"", []string{"sidecar.probes.mode=httpGet probes the diagnostics port"}},
		{"probe mode not a string", []string{"sidecar.probes.mode=1"},
			"", []string{"/sidecar/probes/mode", "string"}},
		{"own app without an image", []string{"demo.enabled=false"},
			"", []string{"app.image.repository is required when demo.enabled is false"}},
		{"metrics on the API port", []string{"metrics.port=4040"},
			"", []string{"metrics.port and sidecar.httpPort are both 4040: the diagnostics listener needs its own port"}},
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
		// Monitoring, PDB, NetworkPolicy, commonLabels (monitoring_test.go).
		{"PDB with both bounds", []string{"pdb.create=true", "pdb.minAvailable=2", "pdb.maxUnavailable=1"},
			"", []string{"pdb.maxUnavailable (1) and pdb.minAvailable (2) are mutually exclusive: set one"}},
		{"PDB with both bounds as percentages", []string{"pdb.create=true", "pdb.minAvailable=50%", "pdb.maxUnavailable=50%"},
			"", []string{"pdb.maxUnavailable (50%) and pdb.minAvailable (50%) are mutually exclusive"}},
		{"PDB percentage without a number", []string{"pdb.maxUnavailable=half"},
			"", []string{"/pdb/maxUnavailable", "does not match pattern"}},
		{"PDB negative bound", []string{"pdb.minAvailable=-1"},
			"", []string{"/pdb/minAvailable", "minimum"}},
		{"PDB in dependency mode", []string{"workload.enabled=false", "pdb.create=true"},
			"", []string{"pdb.create=true requires workload.enabled=true"}},
		{"ServiceMonitor and PodMonitor together", []string{"metrics.serviceMonitor.enabled=true", "metrics.podMonitor.enabled=true"},
			"", []string{"metrics.serviceMonitor.enabled and metrics.podMonitor.enabled are both true: Prometheus would scrape every pod twice"}},
		{"ServiceMonitor without metrics", []string{"metrics.enabled=false", "sidecar.probes.mode=exec", "metrics.serviceMonitor.enabled=true"},
			"", []string{"metrics.serviceMonitor.enabled=true requires metrics.enabled=true"}},
		{"ServiceMonitor without the metrics Service", []string{"metrics.service.enabled=false", "metrics.serviceMonitor.enabled=true"},
			"", []string{"metrics.serviceMonitor.enabled=true requires metrics.service.enabled=true"}},
		{"PodMonitor in dependency mode", []string{"workload.enabled=false", "metrics.podMonitor.enabled=true"},
			"", []string{"metrics.podMonitor.enabled=true requires workload.enabled=true"}},
		{"PrometheusRule without metrics", []string{"metrics.enabled=false", "sidecar.probes.mode=exec", "metrics.prometheusRule.enabled=true"},
			"", []string{"metrics.prometheusRule.enabled=true requires metrics.enabled=true"}},
		{"scrape timeout longer than the interval", []string{"metrics.podMonitor.enabled=true", "metrics.podMonitor.scrapeTimeout=1m"},
			"", []string{"metrics.podMonitor.scrapeTimeout (1m) must not be longer than metrics.podMonitor.interval (30s)"}},
		{"scrape interval not a Prometheus duration", []string{"metrics.serviceMonitor.interval=30sec"},
			"", []string{"/metrics/serviceMonitor/interval", "does not match pattern"}},
		{"empty oneLeaderFor", []string{"metrics.prometheusRule.oneLeaderFor="},
			"", []string{"/metrics/prometheusRule/oneLeaderFor", "minLength"}},
		{"alert label that is not a Prometheus label name", []string{"metrics.prometheusRule.alertLabels.team-name=x"},
			"", []string{"invalid propertyName 'team-name'"}},
		{"metrics Service of an unknown type", []string{"metrics.service.type=ExternalName"},
			"", []string{"/metrics/service/type", "must be one of 'ClusterIP', 'NodePort', 'LoadBalancer'"}},
		{"StatefulSet's governing metrics Service as a LoadBalancer", []string{"workload.kind=StatefulSet", "metrics.service.type=LoadBalancer"},
			"", []string{"metrics.service.type=LoadBalancer: with workload.kind=StatefulSet the metrics port is on the chart's headless governing Service", "workload.serviceName"}},
		{"typo in a ServiceMonitor value", []string{"metrics.serviceMonitor.intervall=1m"},
			"", []string{"intervall", "additional properties"}},
		{"NetworkPolicy in dependency mode", []string{"workload.enabled=false", "networkPolicy.enabled=true"},
			"", []string{"networkPolicy.enabled=true requires workload.enabled=true"}},
		{"NetworkPolicy that would block the leader Service", []string{"leaderLabel.enabled=true", "leaderService.enabled=true", "networkPolicy.enabled=true"},
			"", []string{"the leader Service's ports would be blocked; allow them with networkPolicy.extraIngress"}},
		{"commonLabels replacing the chart's label", []string{`commonLabels.app\.kubernetes\.io/name=other`},
			"", []string{"commonLabels.app.kubernetes.io/name: the chart sets this label itself"}},
		{"commonLabels replacing the metrics Service's label", []string{`commonLabels.elector-sidecar\.io/metrics=no`},
			"", []string{"commonLabels.elector-sidecar.io/metrics: the chart sets this label itself"}},
		{"commonLabels value a number", []string{"commonLabels.tier=1"},
			"", []string{"/commonLabels/tier", "want string"}},
		{"commonLabels key with a space", []string{"commonLabels.my team=x"},
			"", []string{"invalid propertyName 'my team'"}},
		{"ServiceMonitor label replacing the chart's", []string{"metrics.serviceMonitor.enabled=true", `metrics.serviceMonitor.labels.app\.kubernetes\.io/instance=x`},
			"", []string{"metrics.serviceMonitor.labels: the label app.kubernetes.io/instance is already set by the chart"}},
		{"lease guard on a cluster without VAP v1", []string{"leaseGuard.enabled=true"},
			"v1.29.5", []string{"leaseGuard.enabled=true needs Kubernetes >= 1.30", "set leaseGuard.enabled=false"}},
		{"leader label guard on a cluster without VAP v1", []string{"leaderLabel.enabled=true"},
			"v1.29.5", []string{"leaderLabel.guard.enabled=true needs Kubernetes >= 1.30", "set leaderLabel.guard.enabled=false"}},
		{"leader label guard not a boolean", []string{"leaderLabel.guard.enabled=yes"},
			"", []string{"/leaderLabel/guard/enabled", "boolean"}},
		{"typo in a leader label guard value", []string{"leaderLabel.guard.enable=true"},
			"", []string{"enable", "additional properties"}},
		{"cluster older than the chart", []string{"sidecar.native=false", "leaseGuard.enabled=false"},
			"v1.27.9", []string{"kubeVersion", ">=1.28.0-0"}},
		{"native sidecar on a cluster without native sidecars", nil,
			"v1.28.4", []string{"sidecar.native=true needs Kubernetes >= 1.29", "set sidecar.native=false"}},
		{"pdb that blocks every drain (maxUnavailable 0)", []string{"pdb.create=true", "pdb.maxUnavailable=0"},
			"", []string{"/pdb/maxUnavailable"}},
		{"pdb that blocks every drain (maxUnavailable 0%)", []string{"pdb.create=true", "pdb.maxUnavailable=0%"},
			"", []string{"/pdb/maxUnavailable"}},
		{"pdb that blocks every drain (minAvailable = replicas)", []string{"pdb.create=true", "pdb.minAvailable=3"},
			"", []string{"pdb.minAvailable 3 with workload.replicas 3 allows no eviction"}},
		{"pdb that blocks every drain (minAvailable 100%)", []string{"pdb.create=true", "pdb.minAvailable=100%"},
			"", []string{"pdb.minAvailable 100% with workload.replicas 3 allows no eviction"}},
		{"sidecar readiness probe with terminationGracePeriodSeconds", []string{"sidecar.probes.readiness.terminationGracePeriodSeconds=5"},
			"", []string{"/sidecar/probes/readiness", "terminationGracePeriodSeconds"}},
		{"sidecar liveness probe with successThreshold 2", []string{"sidecar.probes.liveness.successThreshold=2"},
			"", []string{"/sidecar/probes/liveness/successThreshold"}},
		{"sidecar startup probe with successThreshold 2", []string{"sidecar.probes.startup.successThreshold=2"},
			"", []string{"/sidecar/probes/startup/successThreshold"}},
		{"app readiness probe with terminationGracePeriodSeconds", []string{"app.readinessProbe.terminationGracePeriodSeconds=5", "app.readinessProbe.tcpSocket.port=8080"},
			"", []string{"/app/readinessProbe"}},
		{"app liveness probe with successThreshold 2", []string{"app.livenessProbe.successThreshold=2", "app.livenessProbe.tcpSocket.port=8080"},
			"", []string{"/app/livenessProbe/successThreshold"}},
		{"app startup probe with successThreshold 3", []string{"app.startupProbe.successThreshold=3", "app.startupProbe.tcpSocket.port=8080"},
			"", []string{"/app/startupProbe/successThreshold"}},
		{"app image digest not a sha256", []string{"app.image.digest=latest"},
			"", []string{"/app/image/digest"}},
		{"helm test timeout without a unit", []string{"helmTest.timeout=120"},
			"", []string{"/helmTest/timeout"}},
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
	// A plain-container sidecar works on 1.28, as the README says for clusters without native sidecars.
	if _, err := render(t, renderOpts{Set: []string{"sidecar.native=false"}, KubeVersion: "v1.28.0"}); err != nil {
		t.Errorf("1.28 with sidecar.native=false: %v", err)
	}
	// A PDB that still lets one pod go renders.
	for _, set := range [][]string{{"pdb.create=true", "pdb.minAvailable=2"}, {"pdb.create=true", "pdb.maxUnavailable=1"}, {"pdb.create=true", "pdb.maxUnavailable=34%"}} {
		if _, err := render(t, renderOpts{Set: set}); err != nil {
			t.Errorf("%v: %v", set, err)
		}
	}
	// Without the guards (the defaults; with the leader label, leaderLabel.guard.enabled=false), Kubernetes 1.29 is enough.
	for _, set := range [][]string{nil, {"leaderLabel.enabled=true", "leaderLabel.guard.enabled=false"}} {
		if _, err := render(t, renderOpts{Set: set, KubeVersion: "v1.29.0"}); err != nil {
			t.Errorf("1.29 without the guards %v: %v", set, err)
		}
	}
}
