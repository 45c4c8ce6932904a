package chart

import (
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// podSpec returns the pod template of the rendered Deployment or StatefulSet.
func podSpec(t *testing.T, r rendered, kind string) (corev1.PodTemplateSpec, *int32) {
	t.Helper()
	u := r.get(t, kind, "")
	switch kind {
	case "Deployment":
		var d appsv1.Deployment
		toTyped(t, u, &d)
		return d.Spec.Template, d.Spec.Replicas
	case "StatefulSet":
		var s appsv1.StatefulSet
		toTyped(t, u, &s)
		return s.Spec.Template, s.Spec.Replicas
	}
	t.Fatalf("unknown kind %s", kind)
	return corev1.PodTemplateSpec{}, nil
}

func findContainer(cs []corev1.Container, name string) *corev1.Container {
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	return nil
}

// envMap flattens a container's env: plain values as is, Downward API values as "fieldRef:<path>".
func envMap(c *corev1.Container) map[string]string {
	m := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			m[e.Name] = "fieldRef:" + e.ValueFrom.FieldRef.FieldPath
		default:
			m[e.Name] = e.Value
		}
	}
	return m
}

// probeDesc describes a probe handler: "exec:<argv joined by space>" or "http:<path>@<port>".
func probeDesc(p *corev1.Probe) string {
	switch {
	case p == nil:
		return ""
	case p.Exec != nil:
		return "exec:" + strings.Join(p.Exec.Command, " ")
	case p.HTTPGet != nil:
		return "http:" + p.HTTPGet.Path + "@" + p.HTTPGet.Port.String()
	}
	return "other"
}

// ruleSet flattens RBAC rules into sorted "group/resource[/name]:verb" strings.
func ruleSet(rules []rbacv1.PolicyRule) []string {
	var out []string
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				names := r.ResourceNames
				if len(names) == 0 {
					names = []string{"*"}
				}
				for _, n := range names {
					for _, v := range r.Verbs {
						out = append(out, g+"/"+res+"/"+n+":"+v)
					}
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// checkHardened asserts the securityContext every container of the chart must have.
func checkHardened(t *testing.T, name string, sc *corev1.SecurityContext) {
	t.Helper()
	if sc == nil {
		t.Fatalf("%s: no securityContext", name)
	}
	if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("%s: runAsNonRoot not true", name)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("%s: readOnlyRootFilesystem not true", name)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("%s: allowPrivilegeEscalation not false", name)
	}
	if sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		t.Errorf("%s: capabilities = %+v, want drop ALL", name, sc.Capabilities)
	}
	if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: seccompProfile = %+v, want RuntimeDefault", name, sc.SeccompProfile)
	}
}

// The sidecar only creates core/v1 Events (pkg/kubeclient's recorder never patches one).
var baseRules = []string{
	"/events/*:create",
	"coordination.k8s.io/leases/*:create",
}

func leaseRules(lease string) []string {
	var r []string
	for _, v := range []string{"get", "list", "watch", "update", "patch"} { // patch: the candidate announcement (direct handoff)
		r = append(r, "coordination.k8s.io/leases/"+lease+":"+v)
	}
	return r
}

func sorted(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	sort.Strings(out)
	return out
}

func TestRender(t *testing.T) {
	const fullname = "demo-elector-sidecar"
	// No create: the chart creates the demo store (templates/demostore.yaml); the app must not recreate it.
	demoStoreRules := []string{"/configmaps/" + fullname + "-demo-store:get", "/configmaps/" + fullname + "-demo-store:update"}
	execProbes := [3]string{
		"exec:/elector-sidecar probe --http-address=127.0.0.1:4040 /readyz",
		"exec:/elector-sidecar probe --http-address=127.0.0.1:4040 /healthz",
		"exec:/elector-sidecar probe --http-address=127.0.0.1:4040 /readyz",
	}
	// The default: the kubelet GETs the diagnostics port (container port "metrics").
	httpGetProbes := [3]string{"http:/readyz@metrics", "http:/healthz@metrics", "http:/readyz@metrics"}
	tests := []struct {
		name       string
		files      []string
		kind       string // "" = no workload
		replicas   int32
		native     bool
		appName    string
		appImage   string
		ownApp     bool // demo.enabled=false: the user's container
		image      string
		lease      string
		sa         string
		wantEnv    map[string]string // subset of the sidecar's env
		wantAppEnv map[string]string // subset of the app's env
		probes     [3]string         // startup, liveness, readiness
		rules      []string          // nil = no Role
		wantKinds  []string          // kinds that must be rendered
		noKinds    []string          // kinds that must not be rendered
	}{
		{
			name: "defaults: demo Deployment with a native sidecar", kind: "Deployment", replicas: 3, native: true,
			appName: "app", appImage: "ghcr.io/elector-sidecar/elector-demo:0.2.0", image: "ghcr.io/elector-sidecar/elector-sidecar:0.2.0",
			lease: fullname, sa: fullname,
			wantEnv: map[string]string{
				"POD_NAME": "fieldRef:metadata.name", "POD_NAMESPACE": "fieldRef:metadata.namespace", "POD_UID": "fieldRef:metadata.uid",
				"ELECTOR_LEASE_NAME": fullname, "ELECTOR_LEASE_NAMESPACE": "fieldRef:metadata.namespace",
				"ELECTOR_LEASE_DURATION": "15s", "ELECTOR_RENEW_DEADLINE": "10s", "ELECTOR_RETRY_PERIOD": "2s", "ELECTOR_CLOCK_SKEW_MARGIN": "500ms",
				"ELECTOR_HTTP_ADDRESS": "127.0.0.1:4040", "ELECTOR_HTTP_ENDPOINT": ":9090", "ELECTOR_METRICS_ADDRESS": "",
				"ELECTOR_LOG_FORMAT": "json", "ELECTOR_LOG_LEVEL": "info",
			},
			wantAppEnv: map[string]string{
				"ELECTOR_DEMO_SIDECAR": "http://127.0.0.1:4040", "ELECTOR_DEMO_STORE": "configmap:" + releaseNamespace + "/" + fullname + "-demo-store",
				"ELECTOR_DEMO_INTERVAL": "500ms", "POD_NAME": "fieldRef:metadata.name", "ELECTOR_URL": "http://127.0.0.1:4040",
			},
			probes:    httpGetProbes,
			rules:     sorted(baseRules, leaseRules(fullname), demoStoreRules),
			wantKinds: []string{"ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Service"}, // Service: metrics
			// Nothing cluster-scoped by default: a user with namespace rights only can install it.
			noKinds: []string{"ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"},
		},
		{
			name: "StatefulSet with its own lease and timings", files: []string{"statefulset.yaml"}, kind: "StatefulSet", replicas: 2, native: true,
			appName: "app", appImage: "elector-demo:dev", image: "elector-sidecar:dev", lease: "my-lease", sa: fullname,
			wantEnv: map[string]string{
				"ELECTOR_LEASE_NAME": "my-lease", "ELECTOR_LEASE_DURATION": "20s", "ELECTOR_RENEW_DEADLINE": "15s",
				"ELECTOR_RETRY_PERIOD": "3s", "ELECTOR_CLOCK_SKEW_MARGIN": "1s",
			},
			probes:    httpGetProbes,
			rules:     sorted(baseRules, leaseRules("my-lease"), demoStoreRules),
			wantKinds: []string{"Service"},
			noKinds:   []string{"ValidatingAdmissionPolicy"},
		},
		{
			name: "plain container, exec probes, no metrics", files: []string{"plain-container.yaml"}, kind: "Deployment", replicas: 3, native: false,
			appName: "app", appImage: "ghcr.io/elector-sidecar/elector-demo:0.2.0", image: "ghcr.io/elector-sidecar/elector-sidecar:0.2.0",
			lease: fullname, sa: fullname,
			wantEnv: map[string]string{"ELECTOR_HTTP_ADDRESS": "127.0.0.1:4040", "ELECTOR_HTTP_ENDPOINT": "", "ELECTOR_LOG_FORMAT": "text", "ELECTOR_LOG_LEVEL": "debug"},
			probes:  execProbes,
			rules:   sorted(baseRules, leaseRules(fullname), demoStoreRules),
		},
		{
			name: "your own app, no probes", files: []string{"own-app.yaml"}, kind: "Deployment", replicas: 2, native: true,
			appName: "web", appImage: "registry.example/team/web:1.2.3", ownApp: true, image: "ghcr.io/elector-sidecar/elector-sidecar:0.2.0",
			lease: fullname, sa: fullname,
			wantEnv:    map[string]string{"EXTRA": "1", "ELECTOR_LEASE_NAME": fullname},
			wantAppEnv: map[string]string{"GREETING": "hello", "ELECTOR_URL": "http://127.0.0.1:4040", "ELECTOR_DEMO_STORE": ""},
			rules:      sorted(baseRules, leaseRules(fullname)),
			noKinds:    []string{"ConfigMap"}, // no demo store
		},
		{
			name: "dependency mode: RBAC only", files: []string{"dependency-mode.yaml"}, lease: "my-app", sa: "my-app",
			rules:     sorted(baseRules, leaseRules("my-app")),
			wantKinds: []string{"ServiceAccount", "Role", "RoleBinding"},
			noKinds:   []string{"Deployment", "StatefulSet", "Service", "ConfigMap", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"},
		},
		{
			name: "dependency mode with both guards (a cluster admin's install)", files: []string{"dependency-mode.yaml", "guards.yaml"}, lease: "my-app", sa: "my-app",
			rules:     sorted(baseRules, leaseRules("my-app"), podLabelRules),
			wantKinds: []string{"ServiceAccount", "Role", "RoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"},
			noKinds:   []string{"Deployment", "StatefulSet", "ConfigMap"},
		},
		{
			name: "bring your own ServiceAccount and RBAC, nothing cluster-scoped", files: []string{"minimal-permissions.yaml"}, kind: "Deployment", replicas: 3, native: true,
			appName: "app", appImage: "ghcr.io/elector-sidecar/elector-demo:0.2.0", image: "ghcr.io/elector-sidecar/elector-sidecar:0.2.0",
			lease: fullname, sa: "existing-sa", probes: httpGetProbes,
			noKinds: []string{"ServiceAccount", "Role", "RoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRender(t, renderOpts{ValueFiles: tt.files})
			for _, k := range tt.wantKinds {
				if !r.has(k) {
					t.Errorf("no %s rendered; got %v", k, r.kinds())
				}
			}
			for _, k := range tt.noKinds {
				if r.has(k) {
					t.Errorf("%s rendered, want none", k)
				}
			}
			// Nothing cluster-wide except the lease guard.
			for _, o := range r.Objects {
				switch o.GetKind() {
				case "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
				default:
					if o.GetNamespace() != releaseNamespace {
						t.Errorf("%s %s: namespace %q, want %q", o.GetKind(), o.GetName(), o.GetNamespace(), releaseNamespace)
					}
				}
			}

			if tt.rules != nil {
				var role rbacv1.Role
				toTyped(t, r.get(t, "Role", ""), &role)
				if got := ruleSet(role.Rules); !reflect.DeepEqual(got, tt.rules) {
					t.Errorf("Role rules:\n got  %v\n want %v", got, tt.rules)
				}
				var rb rbacv1.RoleBinding
				toTyped(t, r.get(t, "RoleBinding", ""), &rb)
				if rb.RoleRef.Name != role.Name || len(rb.Subjects) != 1 || rb.Subjects[0].Kind != "ServiceAccount" ||
					rb.Subjects[0].Name != tt.sa || rb.Subjects[0].Namespace != releaseNamespace {
					t.Errorf("RoleBinding = %+v %+v, want Role %s to ServiceAccount %s/%s", rb.RoleRef, rb.Subjects, role.Name, releaseNamespace, tt.sa)
				}
			}
			if leaseGuard(r) != nil {
				checkGuard(t, r, tt.lease)
			}
			if tt.kind == "" {
				return
			}

			pod, replicas := podSpec(t, r, tt.kind)
			if replicas == nil || *replicas != tt.replicas {
				t.Errorf("replicas = %v, want %d", replicas, tt.replicas)
			}
			if pod.Spec.ServiceAccountName != tt.sa {
				t.Errorf("serviceAccountName = %q, want %q", pod.Spec.ServiceAccountName, tt.sa)
			}
			// The pod's security context is the user's (workload.podSecurityContext, empty by default): the chart
			// hardens its own containers (the sidecar, the demo app) one by one, never the user's app.
			if psc := pod.Spec.SecurityContext; psc != nil && !reflect.DeepEqual(*psc, corev1.PodSecurityContext{}) {
				t.Errorf("pod securityContext = %+v, want none by default", psc)
			}
			var sidecar *corev1.Container
			if tt.native {
				if len(pod.Spec.InitContainers) != 1 {
					t.Fatalf("want the sidecar as the only initContainer, got %d", len(pod.Spec.InitContainers))
				}
				sidecar = &pod.Spec.InitContainers[0]
				if sidecar.RestartPolicy == nil || *sidecar.RestartPolicy != corev1.ContainerRestartPolicyAlways {
					t.Errorf("native sidecar: restartPolicy = %v, want Always", sidecar.RestartPolicy)
				}
				if len(pod.Spec.Containers) != 1 {
					t.Errorf("want only the app in containers, got %d", len(pod.Spec.Containers))
				}
			} else {
				if len(pod.Spec.InitContainers) != 0 {
					t.Errorf("plain container mode: want no initContainers, got %d", len(pod.Spec.InitContainers))
				}
				sidecar = findContainer(pod.Spec.Containers, "elector")
				if sidecar == nil {
					t.Fatalf("no elector container in %d containers", len(pod.Spec.Containers))
				}
				if sidecar.RestartPolicy != nil {
					t.Errorf("plain container: restartPolicy must not be set")
				}
			}
			if sidecar.Name != "elector" || sidecar.Image != tt.image {
				t.Errorf("sidecar = %s %s, want elector %s", sidecar.Name, sidecar.Image, tt.image)
			}
			env := envMap(sidecar)
			for k, v := range tt.wantEnv {
				if env[k] != v {
					t.Errorf("sidecar env %s = %q, want %q", k, env[k], v)
				}
			}
			checkHardened(t, "sidecar", sidecar.SecurityContext)
			if sidecar.Resources.Requests.Cpu().IsZero() || sidecar.Resources.Limits.Memory().IsZero() {
				t.Errorf("sidecar resources = %+v, want cpu request and memory limit", sidecar.Resources)
			}
			got := [3]string{probeDesc(sidecar.StartupProbe), probeDesc(sidecar.LivenessProbe), probeDesc(sidecar.ReadinessProbe)}
			if got != tt.probes {
				t.Errorf("probes (startup, liveness, readiness):\n got  %q\n want %q", got, tt.probes)
			}

			app := findContainer(pod.Spec.Containers, tt.appName)
			if app == nil {
				t.Fatalf("no app container %q", tt.appName)
			}
			if app.Image != tt.appImage {
				t.Errorf("app image = %q, want %q", app.Image, tt.appImage)
			}
			appEnv := envMap(app)
			for k, v := range tt.wantAppEnv {
				if appEnv[k] != v {
					t.Errorf("app env %s = %q, want %q", k, appEnv[k], v)
				}
			}
			if tt.ownApp {
				// The user's own container gets no resources or security context unless the values set them.
				if app.SecurityContext != nil || len(app.Resources.Limits) != 0 || len(app.Resources.Requests) != 0 {
					t.Errorf("own app: securityContext %+v, resources %+v; want none (the chart imposes nothing on the user's container)", app.SecurityContext, app.Resources)
				}
			} else {
				checkHardened(t, "app (demo)", app.SecurityContext)
				if app.Resources.Limits.Memory().IsZero() {
					t.Errorf("demo app resources = %+v, want demo.resources", app.Resources)
				}
			}
			if got := pod.Annotations["kubectl.kubernetes.io/default-container"]; got != tt.appName {
				t.Errorf("default-container annotation = %q, want %q", got, tt.appName)
			}

			if !strings.Contains(r.Notes, "kubectl get lease "+tt.lease) || !strings.Contains(r.Notes, "/leader") {
				t.Errorf("NOTES.txt does not tell how to watch the election:\n%s", r.Notes)
			}
		})
	}
}

// leaseGuard returns the rendered lease guard policy (the chart's or config/lease-guard's), nil if there is none.
func leaseGuard(r rendered) *unstructured.Unstructured {
	for _, o := range r.Objects {
		if o.GetKind() == "ValidatingAdmissionPolicy" && (strings.HasSuffix(o.GetName(), ".lease-guard.elector-sidecar") || o.GetName() == "elector-sidecar.lease-guard") {
			return o
		}
	}
	return nil
}

// checkGuard asserts the lease guard: namespace-scoped binding, the Lease picked by name, DELETE and
// transitions-decrease rules, namespace deletion allowed.
func checkGuard(t *testing.T, r rendered, lease string) {
	t.Helper()
	var p admissionv1.ValidatingAdmissionPolicy
	var b admissionv1.ValidatingAdmissionPolicyBinding
	u := leaseGuard(r)
	if u == nil {
		t.Fatalf("no lease guard rendered: %v", r.kinds())
	}
	toTyped(t, u, &p)
	toTyped(t, r.get(t, "ValidatingAdmissionPolicyBinding", p.Name), &b)
	if b.Spec.PolicyName != p.Name || !reflect.DeepEqual(b.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) {
		t.Errorf("binding = %+v, want Deny for policy %s", b.Spec, p.Name)
	}
	if sel := b.Spec.MatchResources.NamespaceSelector; sel == nil || sel.MatchLabels["kubernetes.io/metadata.name"] != releaseNamespace {
		t.Errorf("binding namespaceSelector = %+v, want the release namespace", sel)
	}
	if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionv1.Fail {
		t.Errorf("failurePolicy = %v, want Fail", p.Spec.FailurePolicy)
	}
	rules := p.Spec.MatchConstraints.ResourceRules
	if len(rules) != 1 || !slices.Equal(rules[0].Resources, []string{"leases"}) || len(rules[0].ResourceNames) != 0 ||
		!slices.Equal(rules[0].Operations, []admissionv1.OperationType{admissionv1.Update, admissionv1.Delete}) {
		t.Errorf("matchConstraints = %+v, want leases UPDATE/DELETE without resourceNames (DeleteCollection has no name)", rules)
	}
	if len(p.Spec.MatchConditions) != 1 || !strings.Contains(p.Spec.MatchConditions[0].Expression, "'"+lease+"'") {
		t.Errorf("matchConditions = %+v, want the lease %s by name", p.Spec.MatchConditions, lease)
	}
	all := ""
	for _, v := range p.Spec.Variables {
		all += v.Expression + "\n"
	}
	for _, v := range p.Spec.Validations {
		all += v.Expression + "\n"
	}
	for _, want := range []string{"namespaceObject.metadata.deletionTimestamp", "request.operation != 'DELETE'", "leaseTransitions >= oldObject.spec.leaseTransitions",
		"system:serviceaccount:kube-system:namespace-controller"} {
		if !strings.Contains(all, want) {
			t.Errorf("policy does not contain %q:\n%s", want, all)
		}
	}
}
