package chart

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// sidecarAndApp returns the rendered Deployment's sidecar and app containers.
func sidecarAndApp(t *testing.T, r rendered, appName string) (*corev1.Container, *corev1.Container) {
	t.Helper()
	pod, _ := podSpec(t, r, "Deployment")
	sidecar := findContainer(pod.Spec.InitContainers, "elector")
	if sidecar == nil {
		sidecar = findContainer(pod.Spec.Containers, "elector")
	}
	app := findContainer(pod.Spec.Containers, appName)
	if sidecar == nil || app == nil {
		t.Fatalf("sidecar %v, app %v: not both rendered", sidecar, app)
	}
	return sidecar, app
}

// TestAppHealthValues: appHealth.* become the sidecar's ELECTOR_APP_HEALTH_* variables, the probed
// port defaults to the demo's health port (which the demo then serves) or the app's first port, and
// nothing of it is rendered while appHealth.enabled is false.
func TestAppHealthValues(t *testing.T) {
	appHealthVars := []string{"ELECTOR_APP_HEALTH_URL", "ELECTOR_APP_HEALTH_PERIOD", "ELECTOR_APP_HEALTH_TIMEOUT",
		"ELECTOR_APP_HEALTH_FAILURE_THRESHOLD", "ELECTOR_APP_HEALTH_SUCCESS_THRESHOLD"}
	tests := []struct {
		name       string
		files, set []string
		appName    string
		wantEnv    map[string]string // sidecar; "" = absent
		wantAppEnv map[string]string // app; "" = absent
	}{
		{name: "off by default", appName: "app",
			wantEnv:    map[string]string{"ELECTOR_APP_HEALTH_URL": "", "ELECTOR_APP_HEALTH_PERIOD": ""},
			wantAppEnv: map[string]string{"ELECTOR_DEMO_HEALTH_LISTEN": ""}},
		{name: "demo: probes the demo's health port", set: []string{"appHealth.enabled=true"}, appName: "app",
			wantEnv: map[string]string{"ELECTOR_APP_HEALTH_URL": "http://127.0.0.1:8080/healthz", "ELECTOR_APP_HEALTH_PERIOD": "2s",
				"ELECTOR_APP_HEALTH_TIMEOUT": "1s", "ELECTOR_APP_HEALTH_FAILURE_THRESHOLD": "3", "ELECTOR_APP_HEALTH_SUCCESS_THRESHOLD": "1"},
			wantAppEnv: map[string]string{"ELECTOR_DEMO_HEALTH_LISTEN": "127.0.0.1:8080"}},
		{name: "values file with own timings", files: []string{"app-health.yaml"}, set: []string{"demo.healthPort=9000"}, appName: "app",
			wantEnv: map[string]string{"ELECTOR_APP_HEALTH_URL": "http://127.0.0.1:9000/healthz", "ELECTOR_APP_HEALTH_PERIOD": "3s",
				"ELECTOR_APP_HEALTH_TIMEOUT": "500ms", "ELECTOR_APP_HEALTH_FAILURE_THRESHOLD": "2", "ELECTOR_APP_HEALTH_SUCCESS_THRESHOLD": "2"},
			wantAppEnv: map[string]string{"ELECTOR_DEMO_HEALTH_LISTEN": "127.0.0.1:9000"}},
		{name: "own app: its first port and the given path", files: []string{"own-app.yaml"}, set: []string{"appHealth.enabled=true", "appHealth.path=/ready"}, appName: "web",
			wantEnv:    map[string]string{"ELECTOR_APP_HEALTH_URL": "http://127.0.0.1:8080/ready"},
			wantAppEnv: map[string]string{"ELECTOR_DEMO_HEALTH_LISTEN": ""}},
		{name: "explicit port wins", files: []string{"own-app.yaml"}, set: []string{"appHealth.enabled=true", "appHealth.port=8081"}, appName: "web",
			wantEnv: map[string]string{"ELECTOR_APP_HEALTH_URL": "http://127.0.0.1:8081/healthz"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sidecar, app := sidecarAndApp(t, mustRender(t, renderOpts{ValueFiles: tt.files, Set: tt.set}), tt.appName)
			env, appEnv := envMap(sidecar), envMap(app)
			for k, v := range tt.wantEnv {
				if got, ok := env[k]; got != v || ok != (v != "") {
					t.Errorf("sidecar env %s = %q (set %v), want %q", k, got, ok, v)
				}
			}
			for k, v := range tt.wantAppEnv {
				if got, ok := appEnv[k]; got != v || ok != (v != "") {
					t.Errorf("app env %s = %q (set %v), want %q", k, got, ok, v)
				}
			}
			if env["ELECTOR_APP_HEALTH_URL"] != "" {
				for _, k := range appHealthVars {
					if env[k] == "" {
						t.Errorf("sidecar env %s missing with appHealth.enabled", k)
					}
				}
			}
		})
	}
}
