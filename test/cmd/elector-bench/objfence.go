package main

// Section 11, objfence: the admission cost of the fence for Kubernetes
// objects (config/fence: a ValidatingAdmissionPolicy, issue 26). One writer
// updates a fenced ConfigMap (labelled, in the namespace the binding
// selects) and the same ConfigMap in a namespace no binding selects, each a
// closed loop of compare-and-swap updates carrying the same token; runs
// interleaved, --repeats of each. Goal: p99 fenced − plain ≤ 1 ms.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

const objFenceAnnotation = "elector-sidecar.io/fencing-token"

// ObjFenceRun is one closed loop of updates.
type ObjFenceRun struct {
	Variant   string  `json:"variant"` // "fenced" or "plain"
	Updates   int     `json:"updates"`
	PerSecond float64 `json:"perSecond"`
	Latency   Dist    `json:"latency"`
}

// ObjFenceResult is the section's data.
type ObjFenceResult struct {
	Duration float64       `json:"durationSeconds"`
	Repeats  int           `json:"repeats"`
	Runs     []ObjFenceRun `json:"runs"`
}

// objFencePolicy reads config/fence's policy and binding, renamed for the
// bench and bound to namespace ns.
func objFencePolicy(ns string) (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding, error) {
	root, err := framework.RepoRoot()
	if err != nil {
		return nil, nil, err
	}
	var p admissionv1.ValidatingAdmissionPolicy
	var b admissionv1.ValidatingAdmissionPolicyBinding
	for file, into := range map[string]any{"policy.yaml": &p, "binding.yaml": &b} {
		raw, err := os.ReadFile(filepath.Join(root, "config", "fence", file))
		if err != nil {
			return nil, nil, err
		}
		if err := yaml.UnmarshalStrict(raw, into); err != nil {
			return nil, nil, fmt.Errorf("config/fence/%s: %w", file, err)
		}
	}
	name := "elector-bench." + ns + ".fence"
	p.Name, b.Name, b.Spec.PolicyName = name, name, name
	b.Spec.MatchResources.NamespaceSelector.MatchLabels = map[string]string{"kubernetes.io/metadata.name": ns}
	return &p, &b, nil
}

func (e *env) runObjFence(ctx context.Context, o *options) (*ObjFenceResult, error) {
	res := &ObjFenceResult{Duration: o.fenceDuration.Seconds(), Repeats: o.repeats}
	cs := e.cp.Client
	fencedNS, err := e.cp.CreateNamespace(ctx, "bench-objfence")
	if err != nil {
		return nil, err
	}
	plainNS, err := e.cp.CreateNamespace(ctx, "bench-objplain")
	if err != nil {
		return nil, err
	}
	p, b, err := objFencePolicy(fencedNS)
	if err != nil {
		return nil, err
	}
	adm := cs.AdmissionregistrationV1()
	if _, err := adm.ValidatingAdmissionPolicies().Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	defer func() {
		_ = adm.ValidatingAdmissionPolicies().Delete(context.Background(), p.Name, metav1.DeleteOptions{})
	}()
	if _, err := adm.ValidatingAdmissionPolicyBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	defer func() {
		_ = adm.ValidatingAdmissionPolicyBindings().Delete(context.Background(), b.Name, metav1.DeleteOptions{})
	}()

	cm := func(token string) *corev1.ConfigMap {
		return &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "plan", Labels: map[string]string{"elector-sidecar.io/fenced": "true"}, Annotations: map[string]string{objFenceAnnotation: token}},
			Data:       map[string]string{"plan": "0"},
		}
	}
	// The fence is on when a write without a token is refused.
	if err := framework.Eventually(ctx, 20*time.Millisecond, 30*time.Second, "the fence policy to take effect", func(ctx context.Context) error {
		noToken := cm("")
		noToken.Annotations = nil
		_, err := cs.CoreV1().ConfigMaps(fencedNS).Create(ctx, noToken, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if !apierrors.IsForbidden(err) {
			return fmt.Errorf("a ConfigMap without a token: %v", err)
		}
		return nil
	}); err != nil {
		return res, err
	}
	objs := map[string]*corev1.ConfigMap{}
	for variant, ns := range map[string]string{"fenced": fencedNS, "plain": plainNS} {
		c, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm("1"), metav1.CreateOptions{})
		if err != nil {
			return res, fmt.Errorf("%s: %w", variant, err)
		}
		objs[variant] = c
	}
	loop := func(variant string, d time.Duration) (ObjFenceRun, error) {
		run := ObjFenceRun{Variant: variant}
		cur := objs[variant]
		var lat []time.Duration
		start := time.Now()
		for time.Since(start) < d && ctx.Err() == nil {
			next := cur.DeepCopy()
			next.Data["plan"] = strconv.Itoa(len(lat))
			t0 := time.Now()
			got, err := cs.CoreV1().ConfigMaps(cur.Namespace).Update(ctx, next, metav1.UpdateOptions{})
			if err != nil {
				return run, fmt.Errorf("%s update: %w", variant, err)
			}
			lat = append(lat, time.Since(t0))
			cur = got
		}
		objs[variant] = cur
		run.Updates = len(lat)
		run.PerSecond = float64(len(lat)) / time.Since(start).Seconds()
		run.Latency = NewDist(lat, false)
		if len(lat) == 0 {
			return run, errors.New(variant + ": no update in the run")
		}
		return run, ctx.Err()
	}
	for _, v := range []string{"fenced", "plain"} {
		if _, err := loop(v, time.Second); err != nil { // warm-up
			return res, err
		}
	}
	for r := 0; r < o.repeats; r++ {
		for _, v := range []string{"fenced", "plain"} {
			run, err := loop(v, o.fenceDuration)
			if err != nil {
				return res, err
			}
			res.Runs = append(res.Runs, run)
			e.progress("    %s: %d updates, %.0f/s, p50 %s, p99 %s", v, run.Updates, run.PerSecond, fmtMs(run.Latency.P50), fmtMs(run.Latency.P99))
		}
	}
	return res, nil
}

func (r *ObjFenceResult) rows() []Row {
	get := func(variant string, f func(ObjFenceRun) float64) Spread {
		var vs []float64
		for _, run := range r.Runs {
			if run.Variant == variant {
				vs = append(vs, f(run))
			}
		}
		return NewSpread(vs)
	}
	rps := func(x ObjFenceRun) float64 { return x.PerSecond }
	p50 := func(x ObjFenceRun) float64 { return x.Latency.P50 }
	p99 := func(x ObjFenceRun) float64 { return x.Latency.P99 }
	fr, pr := get("fenced", rps), get("plain", rps)
	if fr.N == 0 || pr.N == 0 {
		return nil
	}
	f50, p50s := get("fenced", p50), get("plain", p50)
	f99, p99s := get("fenced", p99), get("plain", p99)
	lat99 := Row{Metric: fmt.Sprintf("ConfigMap update, 1 writer: p99 latency (fenced − plain = %s)", fmtMs(f99.Median-p99s.Median)),
		Ours: fmtMsSpread(f99), Baseline: fmtMsSpread(p99s), Ratio: ratio(f99.Median, p99s.Median)}
	goalObjFenceP99.judge(&lat99, f99.Median, p99s.Median)
	return []Row{
		{Metric: "ConfigMap update, 1 writer: updates/s (median; min–max)", Ours: fmtRateSpread(fr), Baseline: fmtRateSpread(pr), Ratio: ratio(fr.Median, pr.Median)},
		{Metric: "ConfigMap update, 1 writer: p50 latency", Ours: fmtMsSpread(f50), Baseline: fmtMsSpread(p50s), Ratio: ratio(f50.Median, p50s.Median)},
		lat99,
	}
}
