package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/cli/values"
	"helm.sh/helm/v4/pkg/getter"
	release "helm.sh/helm/v4/pkg/release/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
	"github.com/elector-sidecar/elector-sidecar/pkg/fencing/kubeobject"
	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// The fence for Kubernetes objects (issue 26): the chart's fence policy,
// installed on the real apiserver, and pkg/fencing/kubeobject as the app.

var (
	configMapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	widgetsGVR    = schema.GroupVersionResource{Group: "fence.elector-sidecar.io", Version: "v1", Resource: "widgets"}
	gvrByKind     = map[string]schema.GroupVersionResource{
		"ValidatingAdmissionPolicy":        {Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"},
		"ValidatingAdmissionPolicyBinding": {Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"},
		"Role":                             {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
		"RoleBinding":                      {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
	}
	crdOnce sync.Once
	crdErr  error
)

const (
	fenceRelease = "app"
	fencedLabel  = "elector-sidecar.io/fenced"
	podNameExtra = "authentication.kubernetes.io/pod-name"
	fenceRules   = `fence.rules=[{"apiGroups":[""],"resources":["configmaps"]},{"apiGroups":["fence.elector-sidecar.io"],"resources":["widgets","widgets/status"]}]`
)

// fenceEnv is the fence installed for one namespace and Lease.
type fenceEnv struct {
	t      *testing.T
	ctx    context.Context
	ns     string
	admin  dynamic.Interface
	sa     string // the app's ServiceAccount user name, from the chart's RoleBinding
	holder bool
	remove []func() // deletes one of the release's objects (not the kept ones), in install order
}

func adminDynamic(t *testing.T) dynamic.Interface {
	t.Helper()
	d, err := dynamic.NewForConfig(env.cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// installWidgetCRD creates testdata/widget-crd.yaml once and waits until it is served.
func installWidgetCRD(t *testing.T, ctx context.Context) {
	t.Helper()
	crdOnce.Do(func() {
		raw, err := os.ReadFile(filepath.Join("testdata", "widget-crd.yaml"))
		if err != nil {
			crdErr = err
			return
		}
		crd := &unstructured.Unstructured{}
		if crdErr = utilyaml.Unmarshal(raw, &crd.Object); crdErr != nil {
			return
		}
		crdGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
		d := adminDynamic(t)
		if _, crdErr = d.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); crdErr != nil {
			return
		}
		crdErr = framework.Eventually(ctx, framework.PollInterval, 30*time.Second, "the Widget CRD to be served", func(ctx context.Context) error {
			_, err := d.Resource(widgetsGVR).Namespace("default").List(ctx, metav1.ListOptions{})
			return err
		})
	})
	if crdErr != nil {
		t.Fatalf("Widget CRD: %v", crdErr)
	}
}

// renderFence renders the chart's fence objects (templates/fence-*.yaml) for
// release fenceRelease in ns, with the Lease lease.
func renderFence(t *testing.T, ns, lease string, set ...string) []*unstructured.Unstructured {
	t.Helper()
	opts := values.Options{
		Values:     append([]string{"fence.enabled=true", "fence.rbac.create=true", "workload.enabled=false", "election.leaseName=" + lease}, set...),
		JSONValues: []string{fenceRules},
	}
	vals, err := opts.MergeValues(getter.Providers{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := loader.Load(filepath.Join("..", "..", "charts", "elector-sidecar"))
	if err != nil {
		t.Fatal(err)
	}
	install := action.NewInstall(action.NewConfiguration(action.ConfigurationSetLogger(slog.NewTextHandler(io.Discard, nil))))
	install.DryRunStrategy = action.DryRunClient
	install.ReleaseName, install.Namespace, install.Replace = fenceRelease, ns, true
	if install.KubeVersion, err = common.ParseKubeVersion("v1.37.0"); err != nil {
		t.Fatal(err)
	}
	rel, err := install.Run(c, vals)
	if err != nil {
		t.Fatalf("render the chart's fence: %v", err)
	}
	var manifest string
	switch r := rel.(type) {
	case *release.Release:
		manifest = r.Manifest
	case release.Release:
		manifest = r.Manifest
	default:
		t.Fatalf("unexpected release type %T", rel)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: m}
		if _, ok := gvrByKind[u.GetKind()]; ok && strings.Contains(u.GetName(), "fence") {
			out = append(out, u)
		}
	}
	return out
}

// installFence installs the chart's fence for ns (and, with holder, its
// holder check on the Lease lease) and waits until the apiserver enforces it.
func installFence(t *testing.T, ctx context.Context, ns, lease string, holder bool) *fenceEnv {
	t.Helper()
	installWidgetCRD(t, ctx)
	f := &fenceEnv{t: t, ctx: ctx, ns: ns, admin: adminDynamic(t), holder: holder}
	t.Cleanup(f.deleteObjects)
	objs := renderFence(t, ns, lease, fmt.Sprintf("fence.holderCheck.enabled=%v", holder))
	for _, o := range objs {
		gvr := gvrByKind[o.GetKind()]
		var r dynamic.ResourceInterface = f.admin.Resource(gvr)
		if o.GetNamespace() != "" {
			r = f.admin.Resource(gvr).Namespace(o.GetNamespace())
		}
		// helm.sh/resource-policy: keep (the fence's Lease anchor): helm leaves
		// it on uninstall and takes it over on the next install.
		kept := o.GetAnnotations()["helm.sh/resource-policy"] == "keep"
		if _, err := r.Create(ctx, o, metav1.CreateOptions{}); err != nil && !(kept && apierrors.IsAlreadyExists(err)) {
			t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
		}
		if !kept {
			name := o.GetName()
			f.remove = append(f.remove, func() { _ = r.Delete(context.Background(), name, metav1.DeleteOptions{}) })
		}
		if o.GetKind() == "RoleBinding" {
			subj := o.Object["subjects"].([]any)[0].(map[string]any)
			f.sa = fmt.Sprintf("system:serviceaccount:%s:%s", subj["namespace"], subj["name"])
		}
	}
	// The policy takes effect when the apiserver's informers have it: wait
	// until a create without a token is refused for both kinds.
	for _, gvr := range []schema.GroupVersionResource{configMapsGVR, widgetsGVR} {
		probe := fencedObject(gvr, "probe", nil)
		f.waitFor(fmt.Sprintf("the fence to reject a %s without a token", gvr.Resource), func(ctx context.Context) error {
			_, err := f.admin.Resource(gvr).Namespace(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err == nil || !strings.Contains(err.Error(), "missing fencing token") {
				return fmt.Errorf("dry-run create without a token: %v", err)
			}
			return nil
		})
	}
	if holder {
		probe := fencedObject(configMapsGVR, "probe", nil)
		kubeobject.Stamp(probe, 1<<40)
		nobody := f.as("pod-nobody").Resource(configMapsGVR).Namespace(ns)
		f.waitFor("the holder check to reject a pod that does not hold the Lease", func(ctx context.Context) error {
			_, err := nobody.Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err == nil || !strings.Contains(err.Error(), "held by") {
				return fmt.Errorf("dry-run create from pod-nobody: %v", err)
			}
			return nil
		})
	}
	return f
}

// deleteObjects deletes the release's objects in the reverse of install
// order, as helm uninstall does: the holder check before the fence.
func (f *fenceEnv) deleteObjects() {
	for i := len(f.remove) - 1; i >= 0; i-- {
		f.remove[i]()
	}
	f.remove = nil
}

// uninstall deletes the release's fence objects (not the kept Lease anchor)
// and waits until the apiserver no longer applies the fence: a create
// without a token is admitted. The fence goes last, so the apiserver's
// policies are then ones it computed without any of the release's bindings,
// the step that also stops a parameter informer no binding uses.
func (f *fenceEnv) uninstall() {
	f.t.Helper()
	f.deleteObjects()
	probe := fencedObject(configMapsGVR, "probe", nil)
	f.waitFor("the fence to admit a ConfigMap without a token once uninstalled", func(ctx context.Context) error {
		_, err := f.admin.Resource(configMapsGVR).Namespace(f.ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
}

func (f *fenceEnv) waitFor(what string, cond func(ctx context.Context) error) {
	f.t.Helper()
	if err := framework.Eventually(f.ctx, framework.PollInterval, 30*time.Second, what, cond); err != nil {
		f.t.Fatal(err)
	}
}

// as returns a dynamic client that is the app's ServiceAccount in pod (the
// identity a bound ServiceAccount token gives: the pod name in userInfo.extra).
func (f *fenceEnv) as(pod string) dynamic.Interface {
	f.t.Helper()
	cfg := rest.CopyConfig(env.cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: f.sa,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + f.ns, "system:authenticated"},
		Extra:    map[string][]string{podNameExtra: {pod}},
	}
	cfg.QPS, cfg.Burst = -1, 0 // no client-side rate limit: the writers below send bursts
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	return d
}

// writer is pkg/fencing/kubeobject for gvr in the namespace, as pod.
func (f *fenceEnv) writer(pod string, gvr schema.GroupVersionResource) *kubeobject.Client {
	return kubeobject.New(f.as(pod).Resource(gvr).Namespace(f.ns), pod)
}

func (f *fenceEnv) get(gvr schema.GroupVersionResource, name string) *unstructured.Unstructured {
	f.t.Helper()
	u, err := f.admin.Resource(gvr).Namespace(f.ns).Get(f.ctx, name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return u
}

// fencedObject is a ConfigMap or Widget with the fence's label (labels nil:
// the default label; an empty map: none).
func fencedObject(gvr schema.GroupVersionResource, name string, labels map[string]string) *unstructured.Unstructured {
	if labels == nil {
		labels = map[string]string{fencedLabel: "true"}
	}
	u := &unstructured.Unstructured{Object: map[string]any{}}
	if gvr == configMapsGVR {
		u.SetAPIVersion("v1")
		u.SetKind("ConfigMap")
		u.Object["data"] = map[string]any{"plan": "initial"}
	} else {
		u.SetAPIVersion("fence.elector-sidecar.io/v1")
		u.SetKind("Widget")
		u.Object["spec"] = map[string]any{"size": int64(1)}
	}
	u.SetName(name)
	u.SetLabels(labels)
	return u
}

func withPlan(u *unstructured.Unstructured, plan string) *unstructured.Unstructured {
	u = u.DeepCopy()
	if u.GetKind() == "ConfigMap" {
		u.Object["data"] = map[string]any{"plan": plan}
	} else {
		u.Object["status"] = map[string]any{"plan": plan}
	}
	return u
}

// applyConfig is what a writer applies for u: its kind, name and labels.
func applyConfig(u *unstructured.Unstructured) *unstructured.Unstructured {
	a := &unstructured.Unstructured{Object: map[string]any{}}
	a.SetAPIVersion(u.GetAPIVersion())
	a.SetKind(u.GetKind())
	a.SetName(u.GetName())
	a.SetLabels(u.GetLabels())
	return a
}

func planOf(u *unstructured.Unstructured) string {
	if u.GetKind() == "ConfigMap" {
		s, _, _ := unstructured.NestedString(u.Object, "data", "plan")
		return s
	}
	s, _, _ := unstructured.NestedString(u.Object, "status", "plan")
	return s
}

// staleWrites sends n writes (updates, patches and applies in turn; to the
// status subresource for a Widget) of name with token, from workers
// goroutines, and returns how many were admitted and the errors.
func staleWrites(ctx context.Context, c *kubeobject.Client, current *unstructured.Unstructured, token int64, n, workers int) (admitted int, errs []error) {
	var mu sync.Mutex
	next := make(chan int)
	var wg sync.WaitGroup
	status := current.GetKind() != "ConfigMap"
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				obj := withPlan(current, fmt.Sprintf("stale write %d", i))
				var err error
				switch i % 3 {
				case 0:
					if status {
						_, err = c.UpdateStatus(ctx, token, obj)
					} else {
						_, err = c.Update(ctx, token, obj)
					}
				case 1:
					if status {
						_, err = c.PatchStatus(ctx, token, obj.GetName(), []byte(`{"status":{"plan":"stale patch"}}`))
					} else {
						_, err = c.Patch(ctx, token, obj.GetName(), types.MergePatchType, []byte(`{"data":{"plan":"stale patch"}}`))
					}
				default:
					apply := withPlan(applyConfig(current), "stale apply")
					if status {
						_, err = c.ApplyStatus(ctx, token, apply)
					} else {
						_, err = c.Apply(ctx, token, apply)
					}
				}
				mu.Lock()
				if err == nil {
					admitted++
				} else {
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return admitted, errs
}

// checkStaleRejections fails unless every error is the fence's rejection of
// token against highest, naming both tokens.
func checkStaleRejections(t *testing.T, errs []error, token, highest int64) {
	t.Helper()
	for _, err := range errs {
		var stale *fencing.StaleTokenError
		if !errors.As(err, &stale) || stale.Token != token || stale.Highest != highest {
			t.Fatalf("a rejection is not the fence's (token %d against %d): %v", token, highest, err)
		}
		var api apierrors.APIStatus
		if !errors.As(err, &api) || !strings.Contains(api.Status().Message, fmt.Sprint(token)) || !strings.Contains(api.Status().Message, fmt.Sprint(highest)) {
			t.Fatalf("the API's rejection does not name both tokens %d and %d: %v", token, highest, err)
		}
	}
}
