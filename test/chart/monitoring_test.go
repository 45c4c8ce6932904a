package chart

import (
	"cmp"
	"context"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// metricsLabel marks the one Service per release that publishes the pods' metrics ports.
const metricsLabel = "elector-sidecar.io/metrics"

// selectorLabels are the chart's selector labels for release demo.
var selectorLabels = map[string]string{"app.kubernetes.io/name": "elector-sidecar", "app.kubernetes.io/instance": releaseName}

// selects reports whether a matchLabels selector selects an object with these labels.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func services(t *testing.T, r rendered) []corev1.Service {
	t.Helper()
	var out []corev1.Service
	for _, o := range r.Objects {
		if o.GetKind() == "Service" {
			var s corev1.Service
			toTyped(t, o, &s)
			out = append(out, s)
		}
	}
	return out
}

// sidecarOf returns the sidecar container of a rendered workload (native or plain).
func sidecarOf(t *testing.T, pod corev1.PodTemplateSpec) *corev1.Container {
	t.Helper()
	if c := findContainer(pod.Spec.InitContainers, "elector"); c != nil {
		return c
	}
	if c := findContainer(pod.Spec.Containers, "elector"); c != nil {
		return c
	}
	t.Fatal("no elector container")
	return nil
}

// TestMetricsService: with metrics on, exactly one Service per release publishes the pods' metrics port,
// for either workload kind: <fullname>-metrics for a Deployment (or a StatefulSet with its own
// serviceName), the headless governing Service for a StatefulSet; no other Service has the port.
func TestMetricsService(t *testing.T) {
	const fullname = releaseName + "-elector-sidecar"
	tests := []struct {
		name        string
		files       []string
		set         []string
		kind        string // the workload; "" = none
		want        string // the metrics Service; "" = none
		headless    bool
		svcType     corev1.ServiceType
		annotations map[string]string
		port        int32
	}{
		{name: "Deployment: a Service of its own", kind: "Deployment", want: fullname + "-metrics", svcType: corev1.ServiceTypeClusterIP, port: 9090},
		{name: "Deployment: type, annotations, port", set: []string{"metrics.service.type=NodePort", `metrics.service.annotations.example\.com/scrape=yes`, "metrics.port=9100"},
			kind: "Deployment", want: fullname + "-metrics", svcType: corev1.ServiceTypeNodePort, annotations: map[string]string{"example.com/scrape": "yes"}, port: 9100},
		{name: "Deployment beside the leader Service", files: []string{"leader-label.yaml"}, kind: "Deployment", want: fullname + "-metrics", svcType: corev1.ServiceTypeClusterIP, port: 9090},
		{name: "StatefulSet: the governing Service, no second one", files: []string{"statefulset.yaml"}, kind: "StatefulSet", want: fullname, headless: true, port: 9090},
		{name: "StatefulSet: annotations on the governing Service", files: []string{"statefulset.yaml"}, set: []string{"metrics.service.annotations.a=b"},
			kind: "StatefulSet", want: fullname, headless: true, annotations: map[string]string{"a": "b"}, port: 9090},
		{name: "StatefulSet with its own governing Service: a metrics Service", files: []string{"statefulset.yaml"},
			set: []string{"workload.serviceName=mine", "metrics.service.type=LoadBalancer"}, kind: "StatefulSet", want: fullname + "-metrics", svcType: corev1.ServiceTypeLoadBalancer, port: 9090},
		{name: "Deployment, metrics.service off", set: []string{"metrics.service.enabled=false"}, kind: "Deployment"},
		{name: "StatefulSet, metrics.service off: the governing Service has no port", files: []string{"statefulset.yaml"}, set: []string{"metrics.service.enabled=false"}, kind: "StatefulSet"},
		{name: "metrics off", files: []string{"plain-container.yaml"}, kind: "Deployment"},
		{name: "StatefulSet, metrics off", files: []string{"statefulset.yaml"}, set: []string{"metrics.enabled=false", "sidecar.probes.mode=exec"}, kind: "StatefulSet"},
		{name: "dependency mode: no pods of its own", files: []string{"dependency-mode.yaml"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRender(t, renderOpts{ValueFiles: tt.files, Set: tt.set})
			var labelled []corev1.Service
			for _, s := range services(t, r) {
				if s.Labels[metricsLabel] == "true" {
					labelled = append(labelled, s)
					continue
				}
				for _, p := range s.Spec.Ports {
					if p.Name == "metrics" || p.TargetPort.String() == "metrics" {
						t.Errorf("Service %s has the metrics port but not the label %s: a second metrics Service", s.Name, metricsLabel)
					}
				}
				if s.Spec.ClusterIP == corev1.ClusterIPNone && len(s.Spec.Ports) != 0 {
					t.Errorf("governing Service %s has ports %+v without metrics", s.Name, s.Spec.Ports)
				}
			}
			if tt.want == "" {
				if len(labelled) != 0 {
					t.Fatalf("metrics Services %v, want none", labelled)
				}
				return
			}
			if len(labelled) != 1 || labelled[0].Name != tt.want {
				t.Fatalf("metrics Services %v, want exactly %s", labelled, tt.want)
			}
			s := labelled[0]
			want := []corev1.ServicePort{{Name: "metrics", Port: tt.port, TargetPort: intstr.FromString("metrics")}}
			got := slices.Clone(s.Spec.Ports)
			for i := range got {
				got[i].Protocol = "" // TCP or unset (the governing Service matches config/samples/statefulset)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("ports %+v, want %+v", s.Spec.Ports, want)
			}
			if !reflect.DeepEqual(s.Spec.Selector, selectorLabels) {
				t.Errorf("selector %v, want %v", s.Spec.Selector, selectorLabels)
			}
			if !s.Spec.PublishNotReadyAddresses {
				t.Errorf("publishNotReadyAddresses false: unready pods' metrics would not be scraped")
			}
			if (s.Spec.ClusterIP == corev1.ClusterIPNone) != tt.headless || s.Spec.Type != tt.svcType {
				t.Errorf("clusterIP %q type %q, want headless=%v type %q", s.Spec.ClusterIP, s.Spec.Type, tt.headless, tt.svcType)
			}
			if !maps.Equal(s.Annotations, tt.annotations) {
				t.Errorf("annotations %v, want %v", s.Annotations, tt.annotations)
			}
			// The port's target is the sidecar's container port of that name, on the selected pods.
			pod, _ := podSpec(t, r, tt.kind)
			if !selects(s.Spec.Selector, pod.Labels) {
				t.Errorf("selector %v does not select the pods %v", s.Spec.Selector, pod.Labels)
			}
			if !slices.ContainsFunc(sidecarOf(t, pod).Ports, func(p corev1.ContainerPort) bool { return p.Name == "metrics" && p.ContainerPort == tt.port }) {
				t.Errorf("the sidecar has no container port metrics=%d", tt.port)
			}
			if tt.headless {
				if sts := r.get(t, "StatefulSet", ""); sts.Object["spec"].(map[string]any)["serviceName"] != s.Name {
					t.Errorf("StatefulSet serviceName is not the governing metrics Service %s", s.Name)
				}
			}
		})
	}
}

// TestServiceAndPodMonitor: the ServiceMonitor selects exactly the metrics Service (not the leader
// Service), the PodMonitor exactly the release's pods, both by the port named metrics, with the values'
// interval, timeout, relabelings, labels and namespace.
func TestServiceAndPodMonitor(t *testing.T) {
	type endpoint struct {
		Port              string           `json:"port"`
		Path              string           `json:"path"`
		Interval          string           `json:"interval"`
		ScrapeTimeout     string           `json:"scrapeTimeout"`
		Relabelings       []map[string]any `json:"relabelings"`
		MetricRelabelings []map[string]any `json:"metricRelabelings"`
	}
	type monitorSpec struct {
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Endpoints           []endpoint `json:"endpoints"`
		PodMetricsEndpoints []endpoint `json:"podMetricsEndpoints"`
	}
	tests := []struct {
		name      string
		files     []string
		set       []string
		kind      string // ServiceMonitor or PodMonitor
		workload  string
		namespace string
		labels    map[string]string // besides the chart's
		ep        endpoint
	}{
		{name: "ServiceMonitor, defaults", set: []string{"metrics.serviceMonitor.enabled=true"}, kind: "ServiceMonitor", workload: "Deployment",
			namespace: releaseNamespace, ep: endpoint{Port: "metrics", Path: "/metrics", Interval: "30s", ScrapeTimeout: "10s"}},
		{name: "ServiceMonitor beside the leader Service", files: []string{"leader-label.yaml"}, set: []string{"metrics.serviceMonitor.enabled=true"}, kind: "ServiceMonitor",
			workload: "Deployment", namespace: releaseNamespace, ep: endpoint{Port: "metrics", Path: "/metrics", Interval: "30s", ScrapeTimeout: "10s"}},
		{name: "ServiceMonitor of a StatefulSet", files: []string{"statefulset.yaml"}, set: []string{"metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.interval=", "metrics.serviceMonitor.scrapeTimeout="},
			kind: "ServiceMonitor", workload: "StatefulSet", namespace: releaseNamespace, ep: endpoint{Port: "metrics", Path: "/metrics"}},
		{name: "ServiceMonitor with labels and relabelings (testdata/values/monitoring.yaml)", files: []string{"monitoring.yaml"}, kind: "ServiceMonitor", workload: "Deployment",
			namespace: releaseNamespace, labels: map[string]string{"release": "kube-prometheus-stack"},
			ep: endpoint{Port: "metrics", Path: "/metrics", Interval: "15s", ScrapeTimeout: "5s",
				Relabelings:       []map[string]any{{"targetLabel": "cluster", "replacement": "test"}},
				MetricRelabelings: []map[string]any{{"sourceLabels": []any{"__name__"}, "regex": "go_.*", "action": "drop"}}}},
		{name: "PodMonitor in Prometheus' namespace", set: []string{"metrics.podMonitor.enabled=true", "metrics.podMonitor.namespace=monitoring",
			"metrics.podMonitor.labels.release=prom", "metrics.podMonitor.interval=1m", "metrics.podMonitor.scrapeTimeout=1m"}, kind: "PodMonitor", workload: "Deployment",
			namespace: "monitoring", labels: map[string]string{"release": "prom"}, ep: endpoint{Port: "metrics", Path: "/metrics", Interval: "1m", ScrapeTimeout: "1m"}},
		{name: "PodMonitor of a StatefulSet without a metrics Service", files: []string{"statefulset.yaml"}, set: []string{"metrics.podMonitor.enabled=true", "metrics.service.enabled=false"},
			kind: "PodMonitor", workload: "StatefulSet", namespace: releaseNamespace, ep: endpoint{Port: "metrics", Path: "/metrics", Interval: "30s", ScrapeTimeout: "10s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRender(t, renderOpts{ValueFiles: tt.files, Set: tt.set})
			for _, other := range []string{"ServiceMonitor", "PodMonitor"} {
				if other != tt.kind && r.has(other) {
					t.Errorf("%s rendered beside the %s: every pod would be scraped twice", other, tt.kind)
				}
			}
			u := r.get(t, tt.kind, releaseName+"-elector-sidecar")
			if u.GetAPIVersion() != "monitoring.coreos.com/v1" || u.GetNamespace() != tt.namespace {
				t.Errorf("%s %s in %q, want monitoring.coreos.com/v1 in %q", u.GetAPIVersion(), u.GetKind(), u.GetNamespace(), tt.namespace)
			}
			for k, v := range tt.labels {
				if u.GetLabels()[k] != v {
					t.Errorf("label %s=%q, want %q", k, u.GetLabels()[k], v)
				}
			}
			if u.GetLabels()["app.kubernetes.io/instance"] != releaseName {
				t.Errorf("labels %v lack the chart's", u.GetLabels())
			}
			var spec monitorSpec
			b, err := yaml.Marshal(u.Object["spec"])
			if err != nil {
				t.Fatal(err)
			}
			if err := yaml.UnmarshalStrict(b, &spec); err != nil {
				t.Fatalf("%s spec: %v\n%s", tt.kind, err, b)
			}
			if !slices.Equal(spec.NamespaceSelector.MatchNames, []string{releaseNamespace}) {
				t.Errorf("namespaceSelector %v, want the release namespace", spec.NamespaceSelector.MatchNames)
			}
			eps := spec.Endpoints
			if tt.kind == "PodMonitor" {
				eps = spec.PodMetricsEndpoints
			}
			if len(eps) != 1 || !reflect.DeepEqual(eps[0], tt.ep) {
				t.Errorf("endpoints %+v, want [%+v]", eps, tt.ep)
			}
			pod, _ := podSpec(t, r, tt.workload)
			if tt.kind == "PodMonitor" {
				if !reflect.DeepEqual(spec.Selector.MatchLabels, selectorLabels) || !selects(spec.Selector.MatchLabels, pod.Labels) {
					t.Errorf("PodMonitor selector %v, want the release's pods %v", spec.Selector.MatchLabels, pod.Labels)
				}
				if !slices.ContainsFunc(sidecarOf(t, pod).Ports, func(p corev1.ContainerPort) bool { return p.Name == "metrics" }) {
					t.Errorf("the sidecar has no container port named metrics")
				}
				return
			}
			var selected []string
			for _, s := range services(t, r) {
				if selects(spec.Selector.MatchLabels, s.Labels) {
					selected = append(selected, s.Name)
					if !slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "metrics" }) {
						t.Errorf("Service %s has no port named metrics", s.Name)
					}
				}
			}
			if len(selected) != 1 {
				t.Errorf("the ServiceMonitor selects Services %v, want exactly the metrics Service", selected)
			}
		})
	}
}

// TestPrometheusRuleMatchesReadme: the chart's PrometheusRule alerts on exactly the README's expressions
// (the ```promql blocks of "Metrics" and "Alerting", in order, same text; the silent-Lease alert's Lease
// is the release's), with oneLeaderFor and the alert
// labels from the values, and Prometheus templates ({{ $labels.lease }}) left for Prometheus.
func TestPrometheusRuleMatchesReadme(t *testing.T) {
	var readmeExprs []string
	for _, b := range framework.MarkdownCodeBlocks(readFile(t, filepath.Join(repoRoot(t), "README.md"))) {
		if b.Lang == "promql" && (b.Under("Metrics") || b.Under("Alerting")) {
			readmeExprs = append(readmeExprs, strings.TrimSpace(b.Code))
		}
	}
	if len(readmeExprs) != 3 || readmeExprs[0] != "sum by (lease) (elector_is_leader) != 1" {
		t.Fatalf("README promql blocks %q, want the one-leader alert, the silent-Lease alert and the renew alert", readmeExprs)
	}
	// The silent-Lease alert names the release's Lease; the README's example is team/billing-nightly-run.
	exampleLease := strings.NewReplacer(`lease="`+releaseNamespace+"/"+releaseName+`-elector-sidecar"`, `lease="team/billing-nightly-run"`)
	type rule struct {
		Alert       string            `json:"alert"`
		Expr        string            `json:"expr"`
		For         string            `json:"for"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	}
	type ruleSpec struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []rule `json:"rules"`
		} `json:"groups"`
	}
	chartReadme := readFile(t, filepath.Join(chartDir(t), "README.md"))
	readme := readFile(t, filepath.Join(repoRoot(t), "README.md"))
	for _, tc := range []struct {
		set    []string
		for1   string
		labels map[string]string
	}{
		{[]string{"metrics.prometheusRule.enabled=true"}, "5m", map[string]string{"severity": "warning"}},
		{[]string{"metrics.prometheusRule.enabled=true", "metrics.prometheusRule.oneLeaderFor=10m", "metrics.prometheusRule.alertLabels.team=payments",
			"metrics.prometheusRule.alertLabels.severity=critical"}, "10m", map[string]string{"severity": "critical", "team": "payments"}},
	} {
		r := mustRender(t, renderOpts{Set: tc.set})
		u := r.get(t, "PrometheusRule", releaseName+"-elector-sidecar")
		b, err := yaml.Marshal(u.Object["spec"])
		if err != nil {
			t.Fatal(err)
		}
		var spec ruleSpec
		if err := yaml.UnmarshalStrict(b, &spec); err != nil {
			t.Fatalf("PrometheusRule spec: %v\n%s", err, b)
		}
		if len(spec.Groups) != 1 {
			t.Fatalf("%d rule groups, want 1", len(spec.Groups))
		}
		var exprs []string
		for _, rl := range spec.Groups[0].Rules {
			exprs = append(exprs, exampleLease.Replace(rl.Expr))
			if !maps.Equal(rl.Labels, tc.labels) {
				t.Errorf("%s labels %v, want %v", rl.Alert, rl.Labels, tc.labels)
			}
			if !strings.Contains(rl.Annotations["summary"], "{{ $labels.lease }}") || !strings.Contains(rl.Annotations["description"], "{{ $labels.lease }}") {
				t.Errorf("%s annotations %v: want Prometheus' {{ $labels.lease }}", rl.Alert, rl.Annotations)
			}
			if !strings.Contains(readme, "`"+rl.Alert+"`") || !strings.Contains(chartReadme, "`"+rl.Alert+"`") {
				t.Errorf("alert %s is not named in README.md and the chart's README", rl.Alert)
			}
		}
		if !slices.Equal(exprs, readmeExprs) {
			t.Errorf("PrometheusRule expressions\n %q\nwant the README's\n %q", exprs, readmeExprs)
		}
		if got := spec.Groups[0].Rules[0]; got.Alert != "ElectorLeaseNotOneLeader" || got.For != tc.for1 {
			t.Errorf("first rule %s for %q, want ElectorLeaseNotOneLeader for %s", got.Alert, got.For, tc.for1)
		}
	}
	if r := mustRender(t, renderOpts{}); r.has("PrometheusRule") || r.has("ServiceMonitor") || r.has("PodMonitor") {
		t.Errorf("prometheus-operator objects by default (the CRDs may not be installed): %v", r.kinds())
	}
}

// TestPodDisruptionBudget: pdb.create renders a PDB over the release's pods with maxUnavailable (default
// 1) or minAvailable.
func TestPodDisruptionBudget(t *testing.T) {
	tests := []struct {
		name     string
		files    []string
		set      []string
		max, min *intstr.IntOrString
	}{
		{name: "default: one at a time", set: []string{"pdb.create=true"}, max: ptrTo(intstr.FromInt32(1))},
		{name: "a percentage", set: []string{"pdb.create=true", "pdb.maxUnavailable=50%"}, max: ptrTo(intstr.FromString("50%"))},
		{name: "minAvailable instead", set: []string{"pdb.create=true", "pdb.minAvailable=2"}, min: ptrTo(intstr.FromInt32(2))},
		{name: "minAvailable zero", set: []string{"pdb.create=true", "pdb.minAvailable=0"}, min: ptrTo(intstr.FromInt32(0))},
		{name: "null is unset", set: []string{"pdb.create=true", "pdb.maxUnavailable=null", "pdb.minAvailable=null"}, max: ptrTo(intstr.FromInt32(1))},
		{name: "minAvailable from a values file, StatefulSet", files: []string{"statefulset.yaml", "monitoring.yaml"}, min: ptrTo(intstr.FromInt32(1))},
		{name: "minAvailable percentage", set: []string{"pdb.create=true", "pdb.minAvailable=50%"}, min: ptrTo(intstr.FromString("50%"))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRender(t, renderOpts{ValueFiles: tt.files, Set: tt.set})
			var pdb policyv1.PodDisruptionBudget
			toTyped(t, r.get(t, "PodDisruptionBudget", releaseName+"-elector-sidecar"), &pdb)
			if !reflect.DeepEqual(pdb.Spec.MaxUnavailable, tt.max) || !reflect.DeepEqual(pdb.Spec.MinAvailable, tt.min) {
				t.Errorf("maxUnavailable %v minAvailable %v, want %v %v", pdb.Spec.MaxUnavailable, pdb.Spec.MinAvailable, tt.max, tt.min)
			}
			if pdb.Spec.Selector == nil || !reflect.DeepEqual(pdb.Spec.Selector.MatchLabels, selectorLabels) || len(pdb.Spec.Selector.MatchExpressions) != 0 {
				t.Errorf("selector %+v, want the release's pods %v", pdb.Spec.Selector, selectorLabels)
			}
		})
	}
	if r := mustRender(t, renderOpts{}); r.has("PodDisruptionBudget") {
		t.Errorf("a PodDisruptionBudget by default")
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestNetworkPolicy: ingress to the release's pods only on the metrics port (from metricsFrom, or any
// source), plus extraIngress; nothing without metrics; never the local API's port.
func TestNetworkPolicy(t *testing.T) {
	tcp := corev1.ProtocolTCP
	metricsRule := func(port int32, from ...networkingv1.NetworkPolicyPeer) networkingv1.NetworkPolicyIngressRule {
		p := intstr.FromInt32(port)
		return networkingv1.NetworkPolicyIngressRule{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &p}}, From: from}
	}
	prom := networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}},
		PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "prometheus"}}}
	appPort := intstr.FromInt32(8080)
	tests := []struct {
		name  string
		files []string
		set   []string
		want  []networkingv1.NetworkPolicyIngressRule
	}{
		{name: "metrics from anywhere", set: []string{"networkPolicy.enabled=true"}, want: []networkingv1.NetworkPolicyIngressRule{metricsRule(9090)}},
		{name: "metrics from Prometheus (testdata/values/monitoring.yaml)", files: []string{"monitoring.yaml"}, want: []networkingv1.NetworkPolicyIngressRule{metricsRule(9090, prom)}},
		{name: "another metrics port", set: []string{"networkPolicy.enabled=true", "metrics.port=9100"},
			want: []networkingv1.NetworkPolicyIngressRule{metricsRule(9100)}},
		{name: "no metrics: no ingress at all", files: []string{"plain-container.yaml"}, set: []string{"networkPolicy.enabled=true"}, want: []networkingv1.NetworkPolicyIngressRule{}},
		{name: "the leader Service's port through extraIngress", files: []string{"leader-label.yaml"},
			set:  []string{"networkPolicy.enabled=true", "networkPolicy.extraIngress[0].ports[0].port=8080"},
			want: []networkingv1.NetworkPolicyIngressRule{metricsRule(9090), {Ports: []networkingv1.NetworkPolicyPort{{Port: &appPort}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRender(t, renderOpts{ValueFiles: tt.files, Set: tt.set})
			var np networkingv1.NetworkPolicy
			toTyped(t, r.get(t, "NetworkPolicy", releaseName+"-elector-sidecar"), &np)
			if !reflect.DeepEqual(np.Spec.PodSelector.MatchLabels, selectorLabels) {
				t.Errorf("podSelector %v, want the release's pods", np.Spec.PodSelector.MatchLabels)
			}
			if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
				t.Errorf("policyTypes %v, want Ingress only (the sidecar must reach the API server)", np.Spec.PolicyTypes)
			}
			if np.Spec.Ingress == nil || !reflect.DeepEqual(np.Spec.Ingress, tt.want) {
				t.Errorf("ingress\n %s\nwant\n %s", mustYAML(t, np.Spec.Ingress), mustYAML(t, tt.want))
			}
			for _, rule := range np.Spec.Ingress {
				for _, p := range rule.Ports {
					if p.Port == nil || p.Port.IntValue() == 4040 {
						t.Errorf("ingress rule %+v reaches the local API's port", rule)
					}
				}
			}
		})
	}
	if r := mustRender(t, renderOpts{}); r.has("NetworkPolicy") {
		t.Errorf("a NetworkPolicy by default")
	}
}

// TestCommonLabelsOnEveryObject: commonLabels are on every object the chart renders, beside the chart's own
// labels, and on the pods (where workload.podLabels wins), for every values file and more combinations.
func TestCommonLabelsOnEveryObject(t *testing.T) {
	common := []string{"commonLabels.cost-center=cc42", `commonLabels.example\.com/tier=backend`}
	wantCommon := map[string]string{"cost-center": "cc42", "example.com/tier": "backend"}
	type combo struct {
		files []string
		set   []string
	}
	var combos []combo
	for _, files := range valueFileSets(t) {
		combos = append(combos, combo{files: files})
	}
	combos = append(combos,
		combo{files: []string{"statefulset.yaml", "monitoring.yaml"}},
		combo{set: []string{"metrics.podMonitor.enabled=true", "metrics.prometheusRule.enabled=true", "metrics.prometheusRule.namespace=monitoring", "pdb.create=true"}},
		combo{files: []string{"leader-label.yaml"}, set: []string{"networkPolicy.enabled=true", "networkPolicy.extraIngress[0].ports[0].port=8080", "metrics.serviceMonitor.enabled=true"}},
		combo{files: []string{"statefulset.yaml"}, set: []string{"workload.serviceName=mine", "metrics.serviceMonitor.enabled=true"}},
		combo{files: []string{"dependency-mode.yaml"}, set: []string{"metrics.prometheusRule.enabled=true"}},
	)
	for _, c := range combos {
		name := strings.Join(append(slices.Clone(c.files), c.set...), ",")
		t.Run(cmp.Or(name, "defaults"), func(t *testing.T) {
			r := mustRender(t, renderOpts{ValueFiles: c.files, Set: append(slices.Clone(c.set), common...)})
			if len(r.Objects) < 3 {
				t.Fatalf("only %v rendered", r.kinds())
			}
			for _, o := range r.Objects {
				labels := o.GetLabels()
				for k, v := range wantCommon {
					if labels[k] != v {
						t.Errorf("%s %s: label %s=%q, want %q", o.GetKind(), o.GetName(), k, labels[k], v)
					}
				}
				for _, k := range []string{"helm.sh/chart", "app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by"} {
					if labels[k] == "" {
						t.Errorf("%s %s: no label %s", o.GetKind(), o.GetName(), k)
					}
				}
				if tmpl, ok, _ := unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "labels"); ok {
					for k, v := range wantCommon {
						if tmpl[k] != v {
							t.Errorf("%s %s: pod label %s=%q, want %q", o.GetKind(), o.GetName(), k, tmpl[k], v)
						}
					}
				}
			}
		})
	}
	// workload.podLabels wins on the pods; the chart's labels are not replaced.
	r := mustRender(t, renderOpts{Set: append([]string{"workload.podLabels.cost-center=cc7"}, common...)})
	pod, _ := podSpec(t, r, "Deployment")
	if pod.Labels["cost-center"] != "cc7" || pod.Labels["example.com/tier"] != "backend" || !selects(selectorLabels, pod.Labels) {
		t.Errorf("pod labels %v, want cost-center=cc7 from podLabels, example.com/tier=backend and the selector labels", pod.Labels)
	}
	if r.get(t, "Deployment", "").GetLabels()["cost-center"] != "cc42" {
		t.Errorf("Deployment labels %v, want commonLabels", r.get(t, "Deployment", "").GetLabels())
	}
}

// testMonitoringDryRun: the chart's ServiceMonitor, PodMonitor, PrometheusRule, PodDisruptionBudget,
// NetworkPolicy and metrics Service pass a server-side dry-run against a real API server with
// prometheus-operator's CRDs (testdata/crds), for several value combinations and the chart README's
// "Monitoring" example; the CRDs' schemas are really enforced (a bad duration is rejected).
func testMonitoringDryRun(t *testing.T, c *cluster) {
	ctx := context.Background()
	c.createNamespace(t, releaseNamespace)
	c.createNamespace(t, "monitoring")

	// The chart README's example values, as a values file.
	var snippet string
	for _, b := range framework.MarkdownCodeBlocks(readFile(t, filepath.Join(chartDir(t), "README.md"))) {
		if b.Lang == "yaml" && b.Under("Monitoring") {
			snippet = b.Code
		}
	}
	if snippet == "" {
		t.Fatal("the chart README has no yaml block under Monitoring")
	}
	snippetFile := filepath.Join(t.TempDir(), "readme-monitoring.yaml")
	if err := os.WriteFile(snippetFile, []byte(snippet), 0o644); err != nil {
		t.Fatal(err)
	}
	valuesDir, err := filepath.Abs(filepath.Join("testdata", "values"))
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(valuesDir, snippetFile)
	if err != nil {
		t.Fatal(err)
	}

	combos := []renderOpts{
		{ValueFiles: []string{rel}},
		{ValueFiles: []string{"monitoring.yaml"}},
		{ValueFiles: []string{"statefulset.yaml", "monitoring.yaml"}, Set: []string{"metrics.service.annotations.a=b"}},
		{ValueFiles: []string{"statefulset.yaml"}, Set: []string{"workload.serviceName=mine", "metrics.service.type=LoadBalancer", "metrics.serviceMonitor.enabled=true",
			"metrics.serviceMonitor.interval=", "metrics.serviceMonitor.scrapeTimeout="}},
		{Set: []string{"metrics.podMonitor.enabled=true", "metrics.podMonitor.namespace=monitoring", "metrics.podMonitor.interval=1m30s",
			"metrics.podMonitor.relabelings[0].sourceLabels[0]=__meta_kubernetes_pod_node_name", "metrics.podMonitor.relabelings[0].targetLabel=node",
			"metrics.prometheusRule.enabled=true", "metrics.prometheusRule.namespace=monitoring", "metrics.prometheusRule.oneLeaderFor=1h",
			"pdb.create=true", "pdb.maxUnavailable=50%", "metrics.service.type=NodePort"}},
		{ValueFiles: []string{"plain-container.yaml"}, Set: []string{"networkPolicy.enabled=true", "pdb.create=true", "pdb.minAvailable=1"}},
		{ValueFiles: []string{"leader-label.yaml"}, Set: []string{"networkPolicy.enabled=true", "networkPolicy.extraIngress[0].ports[0].port=8080"}},
	}
	kinds := map[string]int{}
	for _, o := range combos {
		r := mustRender(t, o)
		for _, obj := range r.Objects {
			if err := c.apply(ctx, obj, true); err != nil {
				t.Errorf("%v %v: %s %s/%s: %v", o.ValueFiles, o.Set, obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
			}
			kinds[obj.GetKind()]++
		}
	}
	for _, k := range []string{"ServiceMonitor", "PodMonitor", "PrometheusRule", "PodDisruptionBudget", "NetworkPolicy", "Service"} {
		if kinds[k] == 0 {
			t.Errorf("no %s was dry-run applied: %v", k, kinds)
		}
	}
	t.Logf("dry-run applied %v", kinds)

	// The CRDs' schemas are enforced: a duration Prometheus would not parse is rejected.
	r := mustRender(t, renderOpts{ValueFiles: []string{"monitoring.yaml"}})
	sm := r.get(t, "ServiceMonitor", "").DeepCopy()
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	eps[0].(map[string]any)["interval"] = "30 seconds"
	if err := unstructured.SetNestedSlice(sm.Object, eps, "spec", "endpoints"); err != nil {
		t.Fatal(err)
	}
	if err := c.apply(ctx, sm, true); !apierrors.IsInvalid(err) {
		t.Errorf("a ServiceMonitor with interval \"30 seconds\": %v, want Invalid from the CRD's schema", err)
	}
	pr := r.get(t, "PrometheusRule", "").DeepCopy()
	groups, _, _ := unstructured.NestedSlice(pr.Object, "spec", "groups")
	groups[0].(map[string]any)["rules"].([]any)[0].(map[string]any)["for"] = "5 minutes"
	if err := unstructured.SetNestedSlice(pr.Object, groups, "spec", "groups"); err != nil {
		t.Fatal(err)
	}
	if err := c.apply(ctx, pr, true); !apierrors.IsInvalid(err) {
		t.Errorf("a PrometheusRule with for \"5 minutes\": %v, want Invalid from the CRD's schema", err)
	}
}
