package chart

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/v2/loader"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// sidecarAndAppOf returns the sidecar (initContainer or plain container "elector") and the container named app.
func sidecarAndAppOf(t *testing.T, pod corev1.PodTemplateSpec, app string) (*corev1.Container, *corev1.Container) {
	t.Helper()
	sidecar := findContainer(pod.Spec.InitContainers, "elector")
	if sidecar == nil {
		sidecar = findContainer(pod.Spec.Containers, "elector")
	}
	a := findContainer(pod.Spec.Containers, app)
	if sidecar == nil || a == nil {
		t.Fatalf("sidecar %v, app %q %v: not both rendered", sidecar != nil, app, a != nil)
	}
	return sidecar, a
}

// TestSidecarProbesModes: sidecar.probes.mode=httpGet (the default) has the kubelet GET /readyz (startup,
// readiness) and /healthz (liveness) on the diagnostics port, the container port "metrics" = metrics.port,
// served by ELECTOR_HTTP_ENDPOINT; exec runs `/elector-sidecar probe` on the loopback API; none has no probes.
// The local API stays on 127.0.0.1 in every mode, and the probe timings are the values'.
func TestSidecarProbesModes(t *testing.T) {
	const execPrefix = "exec:/elector-sidecar probe --http-address=127.0.0.1:4040 "
	tests := []struct {
		name         string
		set          []string
		files        []string
		wantProbes   [3]string // startup, liveness, readiness
		wantEndpoint string    // ELECTOR_HTTP_ENDPOINT, "" = unset
		wantPort     int32     // container port "metrics", 0 = none
	}{
		{name: "default: httpGet on the diagnostics port", wantEndpoint: ":9090", wantPort: 9090,
			wantProbes: [3]string{"http:/readyz@metrics", "http:/healthz@metrics", "http:/readyz@metrics"}},
		{name: "httpGet on another metrics.port", set: []string{"metrics.port=9100"}, wantEndpoint: ":9100", wantPort: 9100,
			wantProbes: [3]string{"http:/readyz@metrics", "http:/healthz@metrics", "http:/readyz@metrics"}},
		{name: "httpGet, plain container", set: []string{"sidecar.native=false", "sidecar.probes.mode=httpGet"}, wantEndpoint: ":9090", wantPort: 9090,
			wantProbes: [3]string{"http:/readyz@metrics", "http:/healthz@metrics", "http:/readyz@metrics"}},
		{name: "exec", set: []string{"sidecar.probes.mode=exec"}, wantEndpoint: ":9090", wantPort: 9090,
			wantProbes: [3]string{execPrefix + "/readyz", execPrefix + "/healthz", execPrefix + "/readyz"}},
		{name: "exec without metrics", files: []string{"plain-container.yaml"},
			wantProbes: [3]string{execPrefix + "/readyz", execPrefix + "/healthz", execPrefix + "/readyz"}},
		{name: "none", set: []string{"sidecar.probes.mode=none"}, wantEndpoint: ":9090", wantPort: 9090},
		{name: "none without metrics", set: []string{"sidecar.probes.mode=none", "metrics.enabled=false"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRender(t, renderOpts{Set: tt.set, ValueFiles: tt.files})
			pod, _ := podSpec(t, r, "Deployment")
			sidecar, _ := sidecarAndAppOf(t, pod, "app")
			got := [3]string{probeDesc(sidecar.StartupProbe), probeDesc(sidecar.LivenessProbe), probeDesc(sidecar.ReadinessProbe)}
			if got != tt.wantProbes {
				t.Errorf("probes (startup, liveness, readiness):\n got  %q\n want %q", got, tt.wantProbes)
			}
			env := envMap(sidecar)
			if e, ok := env["ELECTOR_HTTP_ENDPOINT"]; e != tt.wantEndpoint || ok != (tt.wantEndpoint != "") {
				t.Errorf("ELECTOR_HTTP_ENDPOINT = %q (set %v), want %q", e, ok, tt.wantEndpoint)
			}
			if a := env["ELECTOR_HTTP_ADDRESS"]; a != "127.0.0.1:4040" {
				t.Errorf("ELECTOR_HTTP_ADDRESS = %q, want the local API on loopback, 127.0.0.1:4040", a)
			}
			if _, ok := env["ELECTOR_METRICS_ADDRESS"]; ok {
				t.Errorf("ELECTOR_METRICS_ADDRESS set: the chart uses ELECTOR_HTTP_ENDPOINT, not the deprecated alias")
			}
			var metricsPort int32
			for _, p := range sidecar.Ports {
				if p.Name == "metrics" {
					metricsPort = p.ContainerPort
				}
			}
			if metricsPort != tt.wantPort {
				t.Errorf("container port metrics = %d, want %d", metricsPort, tt.wantPort)
			}
			for _, p := range []*corev1.Probe{sidecar.StartupProbe, sidecar.LivenessProbe, sidecar.ReadinessProbe} {
				if p == nil || p.HTTPGet == nil {
					continue
				}
				// No host: the kubelet connects to the pod IP, where only the diagnostics listener is.
				if p.HTTPGet.Host != "" || p.HTTPGet.Port != intstr.FromString("metrics") || (p.HTTPGet.Scheme != "" && p.HTTPGet.Scheme != corev1.URISchemeHTTP) {
					t.Errorf("httpGet probe %+v, want HTTP on the named port metrics, no host", p.HTTPGet)
				}
			}
			if sidecar.StartupProbe != nil {
				// The values' timings (values.yaml).
				for _, c := range []struct {
					name                  string
					p                     *corev1.Probe
					period, timeout, fail int32
				}{
					{"startup", sidecar.StartupProbe, 1, 2, 60}, {"liveness", sidecar.LivenessProbe, 10, 2, 3}, {"readiness", sidecar.ReadinessProbe, 5, 2, 2},
				} {
					if c.p.PeriodSeconds != c.period || c.p.TimeoutSeconds != c.timeout || c.p.FailureThreshold != c.fail {
						t.Errorf("%s probe timings %d/%d/%d, want period %d timeout %d failureThreshold %d",
							c.name, c.p.PeriodSeconds, c.p.TimeoutSeconds, c.p.FailureThreshold, c.period, c.timeout, c.fail)
					}
				}
			}
			if strings.Contains(r.Notes, "0.0.0.0") {
				t.Errorf("NOTES mention 0.0.0.0; the local API is on loopback in every mode:\n%s", r.Notes)
			}
		})
	}
}

// The volume that holds the ServiceAccount token: the standard kube-api-access-* layout.
var wantTokenVolume = corev1.Volume{Name: "kube-api-access-elector", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
	DefaultMode: new(int32(0o644)),
	Sources: []corev1.VolumeProjection{
		{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: new(int64(3607))}},
		{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
			Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
		{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
			{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
	},
}}}

const tokenDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// tokenMounts returns the mounts of c at the ServiceAccount token directory.
func tokenMounts(c *corev1.Container) []corev1.VolumeMount {
	var out []corev1.VolumeMount
	for _, m := range c.VolumeMounts {
		if strings.HasPrefix(m.MountPath, tokenDir) || strings.HasPrefix(tokenDir, strings.TrimSuffix(m.MountPath, "/")+"/") {
			out = append(out, m)
		}
	}
	return out
}

// checkTokenOnlyIn: the pod automounts no token, has the token volume, the sidecar mounts it read-only at the
// token directory, and the app does so only when appHasToken.
func checkTokenOnlyIn(t *testing.T, pod corev1.PodTemplateSpec, sidecar, app *corev1.Container, appHasToken bool) {
	t.Helper()
	if a := pod.Spec.AutomountServiceAccountToken; a == nil || *a {
		t.Errorf("pod automountServiceAccountToken = %v, want false", a)
	}
	var vol *corev1.Volume
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == wantTokenVolume.Name {
			vol = &pod.Spec.Volumes[i]
		}
	}
	if vol == nil || !equality.Semantic.DeepEqual(*vol, wantTokenVolume) {
		t.Errorf("token volume:\n got  %s\n want %s", mustYAML(t, vol), mustYAML(t, wantTokenVolume))
	}
	want := []corev1.VolumeMount{{Name: wantTokenVolume.Name, MountPath: tokenDir, ReadOnly: true}}
	if got := tokenMounts(sidecar); !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("sidecar token mounts %+v, want %+v", got, want)
	}
	got := tokenMounts(app)
	switch {
	case appHasToken && !equality.Semantic.DeepEqual(got, want):
		t.Errorf("app %s token mounts %+v, want %+v (the demo writes its ConfigMap store through the API)", app.Name, got, want)
	case !appHasToken && len(got) != 0:
		t.Errorf("app %s mounts the ServiceAccount token: %+v; want none", app.Name, got)
	}
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		if c.Name != sidecar.Name && c.Name != app.Name && len(tokenMounts(&c)) != 0 {
			t.Errorf("container %s mounts the token", c.Name)
		}
	}
}

// TestServiceAccountTokenOnlyInTheSidecar: the pod sets automountServiceAccountToken false and only the sidecar
// container (native or plain) mounts the projected ServiceAccount token, in the standard kube-api-access-*
// layout; the app container gets no token, except the default demo app, which writes its ConfigMap store
// through the API. The app's own volumes and mounts come after the token's.
func TestServiceAccountTokenOnlyInTheSidecar(t *testing.T) {
	const pgURL = "postgres://worker@pg:5432/db"
	tests := []struct {
		name        string
		set         []string
		files       []string
		kind        string
		app         string
		appHasToken bool
	}{
		{name: "default: the demo app with its ConfigMap store", kind: "Deployment", app: "app", appHasToken: true},
		{name: "demo app as a StatefulSet, plain sidecar", set: []string{"sidecar.native=false"}, files: []string{"statefulset.yaml"}, kind: "StatefulSet", app: "app", appHasToken: true},
		{name: "your own app", files: []string{"own-app.yaml"}, kind: "Deployment", app: "web"},
		{name: "your own app, plain sidecar", set: []string{"sidecar.native=false"}, files: []string{"own-app.yaml"}, kind: "Deployment", app: "web"},
		{name: "go-worker demo: no ConfigMap store", set: []string{"demo.app=go-worker", "demo.postgresURL=" + pgURL}, kind: "Deployment", app: "app"},
		{name: "bring your own ServiceAccount", files: []string{"minimal-permissions.yaml"}, kind: "Deployment", app: "app", appHasToken: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRender(t, renderOpts{Set: tt.set, ValueFiles: tt.files})
			pod, _ := podSpec(t, r, tt.kind)
			sidecar, app := sidecarAndAppOf(t, pod, tt.app)
			checkTokenOnlyIn(t, pod, sidecar, app, tt.appHasToken)
		})
	}

	// The app's own volumes and mounts stay, after the token's.
	r := mustRender(t, renderOpts{Set: []string{
		"workload.volumes[0].name=scratch", "workload.volumes[0].emptyDir.medium=Memory",
		"app.volumeMounts[0].name=scratch", "app.volumeMounts[0].mountPath=/scratch",
	}})
	pod, _ := podSpec(t, r, "Deployment")
	sidecar, app := sidecarAndAppOf(t, pod, "app")
	checkTokenOnlyIn(t, pod, sidecar, app, true)
	if n := len(pod.Spec.Volumes); n != 2 || pod.Spec.Volumes[0].Name != wantTokenVolume.Name || pod.Spec.Volumes[1].Name != "scratch" {
		t.Errorf("volumes %s, want the token volume, then scratch", mustYAML(t, pod.Spec.Volumes))
	}
	if n := len(app.VolumeMounts); n != 2 || app.VolumeMounts[1].Name != "scratch" || app.VolumeMounts[1].MountPath != "/scratch" {
		t.Errorf("app volumeMounts %+v, want the token, then scratch at /scratch", app.VolumeMounts)
	}
	r = mustRender(t, renderOpts{ValueFiles: []string{"own-app.yaml"}, Set: []string{"app.volumeMounts[0].name=data", "app.volumeMounts[0].mountPath=/data",
		"workload.volumes[0].name=data", "workload.volumes[0].emptyDir.medium=Memory"}})
	pod, _ = podSpec(t, r, "Deployment")
	sidecar, app = sidecarAndAppOf(t, pod, "web")
	checkTokenOnlyIn(t, pod, sidecar, app, false)
	if len(app.VolumeMounts) != 1 || app.VolumeMounts[0].Name != "data" {
		t.Errorf("own app volumeMounts %+v, want only data", app.VolumeMounts)
	}
}

// TestParentChartGetsTheTokenVolume: a parent chart that follows the chart README (automountServiceAccountToken
// false, the sidecar template, elector-sidecar.tokenVolume in volumes) gives the token to the sidecar only; the
// README's parent-chart snippet uses exactly the template calls of testdata/parent, which TestDependency renders.
func TestParentChartGetsTheTokenVolume(t *testing.T) {
	parent, err := loader.Load(filepath.Join("testdata", "parent"))
	if err != nil {
		t.Fatal(err)
	}
	parent.AddDependency(loadChart(t))
	r := mustRender(t, renderOpts{Chart: parent})
	pod, _ := podSpec(t, r, "Deployment")
	sidecar, app := sidecarAndAppOf(t, pod, "my-app")
	checkTokenOnlyIn(t, pod, sidecar, app, false)
	if got := probeDesc(sidecar.ReadinessProbe); got != "http:/readyz@metrics" {
		t.Errorf("parent's sidecar readiness probe %q, want httpGet /readyz on the diagnostics port", got)
	}

	// The chart README's snippet: every line with a template call or automountServiceAccountToken is in testdata/parent.
	readme := readFile(t, filepath.Join(chartDir(t), "README.md"))
	i := strings.Index(readme, "# templates/deployment.yaml\n")
	if i < 0 {
		t.Fatal("chart README: no ```yaml block starting with # templates/deployment.yaml")
	}
	snippet := readme[i:]
	snippet = snippet[:strings.Index(snippet, "```")]
	tmpl := readFile(t, filepath.Join("testdata", "parent", "templates", "deployment.yaml"))
	var checked int
	for _, line := range strings.Split(snippet, "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "#"))
		if !strings.Contains(line, `include "elector-sidecar.`) && !strings.HasPrefix(line, "automountServiceAccountToken:") {
			continue
		}
		line = regexp.MustCompile(`\s+# .*$`).ReplaceAllString(line, "")
		if strings.Contains(line, `"elector-sidecar.container"`) {
			continue // the alternative for older clusters, commented out in the snippet
		}
		checked++
		if !strings.Contains(tmpl, line) {
			t.Errorf("chart README snippet line %q is not in testdata/parent/templates/deployment.yaml", line)
		}
	}
	if checked < 4 {
		t.Errorf("only %d lines of the README snippet checked; want serviceAccountName, automount, initContainer, url, tokenVolume", checked)
	}
}
