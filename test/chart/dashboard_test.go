package chart

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestGrafanaDashboardConfigMapIsOptIn: metrics.grafanaDashboard.enabled renders one ConfigMap labelled for
// Grafana's dashboard sidecar (grafana_dashboard: "1", plus the chart's labels) holding the chart's dashboard
// file byte for byte, in the release namespace or metrics.grafanaDashboard.namespace; by default there is none.
func TestGrafanaDashboardConfigMapIsOptIn(t *testing.T) {
	name := releaseName + "-elector-sidecar-dashboard"
	for _, o := range mustRender(t, renderOpts{}).Objects {
		if o.GetKind() == "ConfigMap" && o.GetName() == name {
			t.Errorf("the dashboard ConfigMap is rendered by default")
		}
	}
	want := readFile(t, filepath.Join(chartDir(t), "dashboards", "elector-sidecar.json"))
	var d struct {
		UID    string            `json:"uid"`
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal([]byte(want), &d); err != nil || d.UID != "elector-sidecar" || len(d.Panels) < 8 {
		t.Fatalf("dashboards/elector-sidecar.json: %v, uid %q, %d panels; want JSON with uid elector-sidecar and its panels", err, d.UID, len(d.Panels))
	}
	for _, tc := range []struct {
		set       []string
		namespace string
	}{
		{[]string{"metrics.grafanaDashboard.enabled=true"}, releaseNamespace},
		{[]string{"metrics.grafanaDashboard.enabled=true", "metrics.grafanaDashboard.namespace=monitoring"}, "monitoring"},
	} {
		r := mustRender(t, renderOpts{Set: tc.set})
		u := r.get(t, "ConfigMap", name)
		if u.GetNamespace() != tc.namespace {
			t.Errorf("%v: namespace %q, want %q", tc.set, u.GetNamespace(), tc.namespace)
		}
		if l := u.GetLabels(); l["grafana_dashboard"] != "1" || l["app.kubernetes.io/instance"] != releaseName {
			t.Errorf("%v: labels %v, want grafana_dashboard=1 and the chart's", tc.set, l)
		}
		data, _, _ := unstructured.NestedStringMap(u.Object, "data")
		if len(data) != 1 || data["elector-sidecar.json"] != want {
			t.Errorf("%v: data keys %d, elector-sidecar.json differs from dashboards/elector-sidecar.json", tc.set, len(data))
		}
	}
}
