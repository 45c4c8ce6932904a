package chart

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/cli/values"
	"helm.sh/helm/v4/pkg/getter"
	ri "helm.sh/helm/v4/pkg/release"
	release "helm.sh/helm/v4/pkg/release/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

const (
	releaseName      = "demo"
	releaseNamespace = "elector-test"
	// defaultKubeVersion is what the helm CLI (built with client-go v0.37) assumes without a cluster;
	// inside test binaries the SDK would otherwise assume v1.20.
	defaultKubeVersion = "v1.37.0"
)

// repoRoot is the repository root (this module lives in test/chart).
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func chartDir(t testing.TB) string { return filepath.Join(repoRoot(t), "charts", "elector-sidecar") }

func loadChart(t testing.TB) *chartv2.Chart {
	t.Helper()
	c, err := loader.Load(chartDir(t))
	if err != nil {
		t.Fatalf("loading chart: %v", err)
	}
	return c
}

// rendered is one `helm install --dry-run=client` of the chart.
type rendered struct {
	Objects  []*unstructured.Unstructured
	Hooks    []*unstructured.Unstructured // helm hooks (the `helm test` objects), not in Manifest
	Notes    string
	Manifest string
}

// get returns the object of the given kind and name ("" = the only one of that kind).
func (r rendered) get(t testing.TB, kind, name string) *unstructured.Unstructured {
	t.Helper()
	var found []*unstructured.Unstructured
	for _, o := range r.Objects {
		if o.GetKind() == kind && (name == "" || o.GetName() == name) {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want exactly one %s %q, found %d; rendered kinds: %v", kind, name, len(found), r.kinds())
	}
	return found[0]
}

func (r rendered) has(kind string) bool {
	for _, o := range r.Objects {
		if o.GetKind() == kind {
			return true
		}
	}
	return false
}

func (r rendered) kinds() []string {
	var k []string
	for _, o := range r.Objects {
		k = append(k, o.GetKind()+"/"+o.GetName())
	}
	sort.Strings(k)
	return k
}

// renderOpts configures one render.
type renderOpts struct {
	ValueFiles  []string // relative to testdata/values
	Set         []string // --set
	KubeVersion string   // default: defaultKubeVersion
	Chart       *chartv2.Chart
	Release     string // default releaseName
	Namespace   string // default releaseNamespace
}

// render renders the chart like `helm template` (client-only dry run: values, schema, templates, NOTES).
func render(t testing.TB, o renderOpts) (rendered, error) {
	t.Helper()
	opts := values.Options{Values: o.Set}
	for _, f := range o.ValueFiles {
		opts.ValueFiles = append(opts.ValueFiles, filepath.Join("testdata", "values", f))
	}
	vals, err := opts.MergeValues(getter.Providers{})
	if err != nil {
		t.Fatalf("values: %v", err)
	}
	c := o.Chart
	if c == nil {
		c = loadChart(t)
	}
	cfg := action.NewConfiguration(action.ConfigurationSetLogger(slog.NewTextHandler(io.Discard, nil)))
	install := action.NewInstall(cfg)
	install.DryRunStrategy = action.DryRunClient
	install.ReleaseName = cmp.Or(o.Release, releaseName)
	install.Namespace = cmp.Or(o.Namespace, releaseNamespace)
	install.Replace = true
	if o.KubeVersion == "" {
		o.KubeVersion = defaultKubeVersion
	}
	kv, err := common.ParseKubeVersion(o.KubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	install.KubeVersion = kv
	rel, err := install.Run(c, vals)
	if err != nil {
		return rendered{}, err
	}
	r, err := toV1(rel)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeManifest(r.Manifest)
	if err != nil {
		t.Fatalf("decoding manifest: %v\n%s", err, r.Manifest)
	}
	var hooks []*unstructured.Unstructured
	for _, h := range r.Hooks {
		hs, err := decodeManifest(h.Manifest)
		if err != nil {
			t.Fatalf("decoding hook %s: %v\n%s", h.Name, err, h.Manifest)
		}
		hooks = append(hooks, hs...)
	}
	return rendered{Objects: objs, Hooks: hooks, Notes: r.Info.Notes, Manifest: r.Manifest}, nil
}

func mustRender(t testing.TB, o renderOpts) rendered {
	t.Helper()
	r, err := render(t, o)
	if err != nil {
		t.Fatalf("render %v %v: %v", o.ValueFiles, o.Set, err)
	}
	return r
}

// mustRenderAs renders as release name in namespace ns.
func mustRenderAs(t testing.TB, name, ns string, o renderOpts) rendered {
	t.Helper()
	o.Release, o.Namespace = name, ns
	return mustRender(t, o)
}

func toV1(rel ri.Releaser) (*release.Release, error) {
	switch r := rel.(type) {
	case *release.Release:
		return r, nil
	case release.Release:
		return &r, nil
	}
	return nil, fmt.Errorf("unexpected release type %T", rel)
}

// decodeManifest splits a multi-document YAML stream into objects, and checks that each one decodes
// strictly into its typed Go struct (client-go scheme) when the kind is known.
func decodeManifest(manifest string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewBufferString(manifest), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if err := strictDecode(u); err != nil {
			return nil, fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
		}
		out = append(out, u)
	}
	return out, nil
}

// strictDecode converts u into its typed object, failing on unknown fields (typos in templates).
func strictDecode(u *unstructured.Unstructured) error {
	obj, err := scheme.Scheme.New(u.GroupVersionKind())
	if err != nil {
		return nil // not a client-go kind; nothing to check
	}
	return runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, obj, true)
}

// toTyped converts an unstructured object into the typed object out.
func toTyped(t testing.TB, u *unstructured.Unstructured, out any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, out, true); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
