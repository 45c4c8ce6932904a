package chart

import (
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// TestDemoAppGoWorkerValues: demo.app=go-worker runs examples/go-worker (/go-worker in the image) as
// the main container, with demo.postgresURL as its DATABASE_URL, the Lease's name as its fenced
// resource and demo.interval; it needs no ConfigMap store (and no RBAC on ConfigMaps), serves the
// health endpoint with appHealth.enabled, and fails without a PostgreSQL URL or with an unknown app.
func TestDemoAppGoWorkerValues(t *testing.T) {
	const fullname = "demo-elector-sidecar"
	const url = "postgres://worker@pg.db.svc:5432/orders"
	tests := []struct {
		name        string
		set         []string
		wantCommand string
		wantAppEnv  map[string]string // "" = absent
		wantStore   bool              // the demo store ConfigMap and its RBAC rule
	}{
		{name: "default: elector-demo", wantCommand: "/elector-demo", wantStore: true,
			wantAppEnv: map[string]string{"ELECTOR_DEMO_INTERVAL": "500ms", "DATABASE_URL": "", "WORKER_INTERVAL": ""}},
		{name: "go-worker", set: []string{"demo.app=go-worker", "demo.postgresURL=" + url, "demo.interval=2s"}, wantCommand: "/go-worker",
			wantAppEnv: map[string]string{"DATABASE_URL": url, "WORKER_RESOURCE": fullname, "WORKER_INTERVAL": "2s",
				"ELECTOR_URL": "http://127.0.0.1:4040", "POD_NAME": "fieldRef:metadata.name",
				"WORKER_HEALTH_LISTEN": "", "ELECTOR_DEMO_STORE": "", "ELECTOR_DEMO_INTERVAL": ""}},
		{name: "go-worker with app health and its own lease name",
			set:         []string{"demo.app=go-worker", "demo.postgresURL=" + url, "appHealth.enabled=true", "election.leaseName=billing"},
			wantCommand: "/go-worker",
			wantAppEnv:  map[string]string{"WORKER_HEALTH_LISTEN": "127.0.0.1:8080", "WORKER_RESOURCE": "billing", "WORKER_INTERVAL": "500ms"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRender(t, renderOpts{Set: tt.set})
			sidecar, app := sidecarAndApp(t, r, "app")
			if !slices.Equal(app.Command, []string{tt.wantCommand}) {
				t.Errorf("app command %q, want [%s]", app.Command, tt.wantCommand)
			}
			if want := "ghcr.io/elector-sidecar/elector-demo:0.2.0"; app.Image != want || sidecar.Image == want {
				t.Errorf("app image %q, sidecar image %q: want the demo image %q (it holds both demo apps; the sidecar image only the sidecar)", app.Image, sidecar.Image, want)
			}
			env := envMap(app)
			for k, v := range tt.wantAppEnv {
				if got, ok := env[k]; got != v || ok != (v != "") {
					t.Errorf("app env %s = %q (set %v), want %q", k, got, ok, v)
				}
			}
			if got := r.has("ConfigMap"); got != tt.wantStore {
				t.Errorf("ConfigMap rendered: %v, want %v (%v)", got, tt.wantStore, r.kinds())
			}
			var role rbacv1.Role
			toTyped(t, r.get(t, "Role", ""), &role)
			hasRule := slices.ContainsFunc(ruleSet(role.Rules), func(s string) bool { return strings.HasPrefix(s, "/configmaps/") })
			if hasRule != tt.wantStore {
				t.Errorf("Role has a ConfigMap rule: %v, want %v: %v", hasRule, tt.wantStore, ruleSet(role.Rules))
			}
			if tt.wantCommand == "/go-worker" && !strings.Contains(r.Notes, "go-worker") {
				t.Errorf("NOTES do not mention go-worker:\n%s", r.Notes)
			}
		})
	}

	for _, bad := range []struct {
		set  []string
		want string
	}{
		{[]string{"demo.app=go-worker"}, "demo.postgresURL is required with demo.app=go-worker"},
		{[]string{"demo.app=rust-worker"}, "/demo/app"},
	} {
		_, err := render(t, renderOpts{Set: bad.set})
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("--set %v: got %v, want an error containing %q", bad.set, err, bad.want)
		}
	}
}
