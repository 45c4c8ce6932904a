package chart

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestOwnAppGetsNothingItDidNotAskFor: with demo.enabled=false the user's container carries no resources and no
// security context, and the pod none either (no runAsUser 65532, no read-only root file system imposed), while the
// sidecar keeps its own hardening and resources.
func TestOwnAppGetsNothingItDidNotAskFor(t *testing.T) {
	r := mustRender(t, renderOpts{Set: []string{"demo.enabled=false", "app.image.repository=registry.example/billing", "app.image.tag=1.4.2"}})
	pod, _ := podSpec(t, r, "Deployment")
	sidecar, app := sidecarAndAppOf(t, pod, "app")
	if app.SecurityContext != nil || app.Resources.Limits != nil || app.Resources.Requests != nil {
		t.Errorf("app: securityContext %+v, resources %+v; want none", app.SecurityContext, app.Resources)
	}
	if pod.Spec.SecurityContext != nil && !reflect.DeepEqual(*pod.Spec.SecurityContext, corev1.PodSecurityContext{}) {
		t.Errorf("pod securityContext %+v, want none", pod.Spec.SecurityContext)
	}
	checkHardened(t, "sidecar", sidecar.SecurityContext)
	if sidecar.SecurityContext.RunAsUser == nil || *sidecar.SecurityContext.RunAsUser != 65532 {
		t.Errorf("sidecar runAsUser %v, want 65532 (set on the container now that the pod sets none)", sidecar.SecurityContext.RunAsUser)
	}
	// What the user sets, the app gets.
	r = mustRender(t, renderOpts{Set: []string{"demo.enabled=false", "app.image.repository=registry.example/billing",
		"app.resources.limits.memory=2Gi", "app.securityContext.runAsUser=1000"}})
	pod, _ = podSpec(t, r, "Deployment")
	_, app = sidecarAndAppOf(t, pod, "app")
	if app.Resources.Limits.Memory().String() != "2Gi" || app.SecurityContext == nil || *app.SecurityContext.RunAsUser != 1000 {
		t.Errorf("app resources %+v, securityContext %+v; want the values' 2Gi and runAsUser 1000", app.Resources, app.SecurityContext)
	}
}

// TestOrdinaryPodFieldsPassThrough: strategy, revisionHistoryLimit, init and extra containers, the app's startup
// probe, lifecycle and image digest reach the workload as given.
func TestOrdinaryPodFieldsPassThrough(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	r := mustRender(t, renderOpts{Set: []string{
		"demo.enabled=false", "app.image.repository=registry.example/billing", "app.image.digest=" + digest,
		"workload.strategy.type=RollingUpdate", "workload.strategy.rollingUpdate.maxSurge=1", "workload.strategy.rollingUpdate.maxUnavailable=0",
		"workload.revisionHistoryLimit=2",
		"workload.initContainers[0].name=migrate", "workload.initContainers[0].image=registry.example/migrate:1",
		"workload.extraContainers[0].name=proxy", "workload.extraContainers[0].image=registry.example/proxy:2",
		"app.startupProbe.httpGet.path=/started", "app.startupProbe.httpGet.port=8080", "app.startupProbe.failureThreshold=30",
		"app.lifecycle.preStop.httpGet.path=/release", "app.lifecycle.preStop.httpGet.port=4040", "app.lifecycle.preStop.httpGet.host=127.0.0.1",
	}})
	var d appsv1.Deployment
	toTyped(t, r.get(t, "Deployment", ""), &d)
	if d.Spec.RevisionHistoryLimit == nil || *d.Spec.RevisionHistoryLimit != 2 {
		t.Errorf("revisionHistoryLimit %v, want 2", d.Spec.RevisionHistoryLimit)
	}
	if ru := d.Spec.Strategy.RollingUpdate; d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || ru == nil ||
		!reflect.DeepEqual(ru.MaxSurge, ptrTo(intstr.FromInt32(1))) || !reflect.DeepEqual(ru.MaxUnavailable, ptrTo(intstr.FromInt32(0))) {
		t.Errorf("strategy %+v, want RollingUpdate maxSurge 1 maxUnavailable 0", d.Spec.Strategy)
	}
	pod := d.Spec.Template.Spec
	var inits []string
	for _, c := range pod.InitContainers {
		inits = append(inits, c.Name)
	}
	if !slices.Equal(inits, []string{"migrate", "elector"}) {
		t.Errorf("initContainers %v, want [migrate elector] (the user's first, then the native sidecar)", inits)
	}
	if findContainer(pod.Containers, "proxy") == nil {
		t.Errorf("no extra container proxy in %d containers", len(pod.Containers))
	}
	app := findContainer(pod.Containers, "app")
	if app.Image != "registry.example/billing@"+digest {
		t.Errorf("app image %q, want the digest", app.Image)
	}
	if app.StartupProbe == nil || app.StartupProbe.HTTPGet == nil || app.StartupProbe.HTTPGet.Path != "/started" || app.StartupProbe.FailureThreshold != 30 {
		t.Errorf("app startupProbe %+v", app.StartupProbe)
	}
	if app.Lifecycle == nil || app.Lifecycle.PreStop == nil || app.Lifecycle.PreStop.HTTPGet.Path != "/release" {
		t.Errorf("app lifecycle %+v", app.Lifecycle)
	}
	// Without them, nothing of the kind is rendered (Kubernetes' defaults apply).
	toTyped(t, mustRender(t, renderOpts{}).get(t, "Deployment", ""), &d)
	if d.Spec.RevisionHistoryLimit != nil || d.Spec.Strategy.Type != "" || len(d.Spec.Template.Spec.InitContainers) != 1 {
		t.Errorf("defaults: revisionHistoryLimit %v, strategy %+v, %d initContainers; want unset and the sidecar only",
			d.Spec.RevisionHistoryLimit, d.Spec.Strategy, len(d.Spec.Template.Spec.InitContainers))
	}
	// A StatefulSet takes updateStrategy (and ignores the Deployment's strategy).
	var s appsv1.StatefulSet
	toTyped(t, mustRender(t, renderOpts{Set: []string{"workload.kind=StatefulSet", "workload.updateStrategy.type=OnDelete", "workload.revisionHistoryLimit=3"}}).get(t, "StatefulSet", ""), &s)
	if s.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType || *s.Spec.RevisionHistoryLimit != 3 {
		t.Errorf("StatefulSet updateStrategy %+v revisionHistoryLimit %v", s.Spec.UpdateStrategy, s.Spec.RevisionHistoryLimit)
	}
}

// TestSoftPodAntiAffinityByDefault: the candidates prefer different nodes, as a preference only; an affinity of
// the user's replaces it, and softAntiAffinity=false turns it off.
func TestSoftPodAntiAffinityByDefault(t *testing.T) {
	pod, _ := podSpec(t, mustRender(t, renderOpts{}), "Deployment")
	aff := pod.Spec.Affinity
	if aff == nil || aff.PodAntiAffinity == nil {
		t.Fatalf("affinity %+v, want a pod anti-affinity", aff)
	}
	if len(aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 0 {
		t.Error("anti-affinity is required: 3 candidates on a 1-node cluster would not schedule")
	}
	pref := aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	if len(pref) != 1 || pref[0].PodAffinityTerm.TopologyKey != "kubernetes.io/hostname" ||
		pref[0].PodAffinityTerm.LabelSelector == nil || pref[0].PodAffinityTerm.LabelSelector.MatchLabels["app.kubernetes.io/instance"] != releaseName {
		t.Errorf("preferred anti-affinity %+v, want one term on kubernetes.io/hostname selecting this release's pods", pref)
	}
	pod, _ = podSpec(t, mustRender(t, renderOpts{Set: []string{"workload.softAntiAffinity=false"}}), "Deployment")
	if pod.Spec.Affinity != nil {
		t.Errorf("softAntiAffinity=false: affinity %+v, want none", pod.Spec.Affinity)
	}
	pod, _ = podSpec(t, mustRender(t, renderOpts{Set: []string{"workload.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=zone",
		"workload.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists"}}), "Deployment")
	if pod.Spec.Affinity == nil || pod.Spec.Affinity.NodeAffinity == nil || pod.Spec.Affinity.PodAntiAffinity != nil {
		t.Errorf("user affinity: %+v, want exactly the user's", pod.Spec.Affinity)
	}
}

// TestHelmTestChecksOneLeaderThroughTheMetricsService: `helm test` runs the demo image's /elector-chart-test
// against the metrics Service with a Role that can only read EndpointSlices; no test hook without that Service.
func TestHelmTestChecksOneLeaderThroughTheMetricsService(t *testing.T) {
	const fullname = releaseName + "-elector-sidecar"
	for _, tt := range []struct {
		name    string
		set     []string
		service string
		want    bool
	}{
		{"Deployment", nil, fullname + "-metrics", true},
		{"StatefulSet (the governing Service carries the metrics port)", []string{"workload.kind=StatefulSet", "workload.replicas=2"}, fullname, true},
		{"no metrics Service", []string{"metrics.service.enabled=false"}, "", false},
		{"disabled", []string{"helmTest.enabled=false"}, "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRender(t, renderOpts{Set: tt.set})
			var pod *corev1.Pod
			var role *rbacv1.Role
			for _, h := range r.Hooks {
				if h.GetAnnotations()["helm.sh/hook"] != "test" {
					t.Errorf("hook %s %s is not a test hook", h.GetKind(), h.GetName())
				}
				switch h.GetKind() {
				case "Pod":
					pod = &corev1.Pod{}
					toTyped(t, h, pod)
				case "Role":
					role = &rbacv1.Role{}
					toTyped(t, h, role)
				}
			}
			if !tt.want {
				if pod != nil {
					t.Fatalf("test pod rendered: %+v", pod.Name)
				}
				return
			}
			if pod == nil || role == nil {
				t.Fatalf("want a test Pod and Role among the hooks, got %d hooks", len(r.Hooks))
			}
			c := pod.Spec.Containers[0]
			if c.Image != "ghcr.io/elector-sidecar/elector-demo:0.2.0" || !slices.Equal(c.Command, []string{"/elector-chart-test"}) {
				t.Errorf("test container %s %v", c.Image, c.Command)
			}
			args := strings.Join(c.Args, " ")
			if !strings.Contains(args, "--service="+tt.service+" ") || !strings.Contains(args, "--namespace="+releaseNamespace) {
				t.Errorf("args %q, want --service=%s", args, tt.service)
			}
			if len(role.Rules) != 1 || !slices.Equal(role.Rules[0].Resources, []string{"endpointslices"}) || !slices.Equal(role.Rules[0].Verbs, []string{"get", "list"}) {
				t.Errorf("test Role rules %+v, want get/list endpointslices only", role.Rules)
			}
			if pod.Spec.ServiceAccountName != role.Name || pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
				t.Errorf("test pod serviceAccount %q restartPolicy %q", pod.Spec.ServiceAccountName, pod.Spec.RestartPolicy)
			}
		})
	}
}

// TestNotesGuardCommandNamesThePackagedChart: the cluster admin's command in NOTES renders from the released
// package (NAME-VERSION.tgz), not from a path of a repository checkout; TestGuards runs it with the real helm.
func TestNotesGuardCommandNamesThePackagedChart(t *testing.T) {
	cmd := guardCommand(t, mustRender(t, renderOpts{}).Notes)
	c := loadChart(t)
	if pkg := " " + c.Metadata.Name + "-" + c.Metadata.Version + ".tgz "; !strings.Contains(cmd, pkg) || strings.Contains(cmd, "charts/") {
		t.Errorf("NOTES' command does not render from%s alone:\n%s", pkg, cmd)
	}
}
