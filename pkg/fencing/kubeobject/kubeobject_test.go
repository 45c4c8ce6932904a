package kubeobject

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
)

func TestStampSetsTheTokenAndKeepsOtherAnnotations(t *testing.T) {
	u := &unstructured.Unstructured{}
	u.SetAnnotations(map[string]string{"other": "x", TokenAnnotation: "3"})
	Stamp(u, 42)
	if got := u.GetAnnotations(); got[TokenAnnotation] != "42" || got["other"] != "x" {
		t.Fatalf("annotations after Stamp: %v", got)
	}
	empty := &unstructured.Unstructured{}
	Stamp(empty, 0)
	if got := empty.GetAnnotations()[TokenAnnotation]; got != "0" {
		t.Fatalf("Stamp on an object without annotations: %q", got)
	}
}

func TestStampMergePatchAddsTheAnnotation(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{``, `{"metadata":{"annotations":{"elector-sidecar.io/fencing-token":"7"}}}`},
		{`null`, `{"metadata":{"annotations":{"elector-sidecar.io/fencing-token":"7"}}}`},
		{`{"data":{"k":"v"}}`, `{"data":{"k":"v"},"metadata":{"annotations":{"elector-sidecar.io/fencing-token":"7"}}}`},
		{`{"metadata":{"labels":{"a":"b"}}}`, `{"metadata":{"annotations":{"elector-sidecar.io/fencing-token":"7"},"labels":{"a":"b"}}}`},
		{`{"metadata":{"annotations":{"x":"y","elector-sidecar.io/fencing-token":"1"}}}`, `{"metadata":{"annotations":{"elector-sidecar.io/fencing-token":"7","x":"y"}}}`},
		{`{"metadata":{"annotations":null}}`, `{"metadata":{"annotations":{"elector-sidecar.io/fencing-token":"7"}}}`},
	} {
		got, err := StampMergePatch([]byte(tc.in), 7)
		if err != nil || string(got) != tc.want {
			t.Errorf("StampMergePatch(%s) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{`[{"op":"add"}]`, `{"metadata":"x"}`, `{"metadata":{"annotations":[1]}}`, `{`} {
		if got, err := StampMergePatch([]byte(bad), 7); err == nil {
			t.Errorf("StampMergePatch(%s) = %s, want an error", bad, got)
		}
	}
}

// forbidden is the error the API server returns when the policy denies a write.
func forbidden(msg string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden,
		Message: `configmaps "plan" is forbidden: ValidatingAdmissionPolicy 'r.ns.fence.elector-sidecar' with binding 'r.ns.fence.elector-sidecar' denied request: ` + msg,
	}}
}

func TestErrorTurnsAPolicyRejectionIntoAStaleTokenError(t *testing.T) {
	api := forbidden("stale fencing token 5: resource already accepted token 6 (configmaps ns/plan, elector-sidecar fence r.ns.fence.elector-sidecar)")
	err := Error(fmt.Errorf("write: %w", api))
	var stale *fencing.StaleTokenError
	if !errors.Is(err, fencing.ErrStaleToken) || !errors.As(err, &stale) || stale.Token != 5 || stale.Highest != 6 {
		t.Fatalf("Error(%v) = %v (%#v), want a StaleTokenError 5 < 6", api, err, stale)
	}
	if !apierrors.IsForbidden(err) {
		t.Errorf("the API error is not reachable from %v", err)
	}
}

func TestErrorTurnsAHolderCheckRejectionIntoStaleOrNotObserved(t *testing.T) {
	lower := forbidden("fencing token 5 from pod pod-a is not lease ns/l (token 6, held by pod-b) (configmaps ns/plan, elector-sidecar fence holder check h)")
	var stale *fencing.StaleTokenError
	if err := Error(lower); !errors.As(err, &stale) || stale.Token != 5 || stale.Highest != 6 || errors.Is(err, ErrLeaseNotObserved) {
		t.Errorf("Error(%v) = %v, want a StaleTokenError 5 < 6", lower, err)
	}
	notHolder := forbidden("fencing token 6 from pod  is not lease ns/l (token 6, held by pod-b) (configmaps ns/plan, h)")
	if err := Error(notHolder); !errors.Is(err, fencing.ErrStaleToken) {
		t.Errorf("Error(%v) = %v, want a stale token (the writer is not the holder)", notHolder, err)
	}
	higher := forbidden("fencing token 7 from pod pod-b is not lease ns/l (token 6, held by pod-a) (configmaps ns/plan, h)")
	if err := Error(higher); !errors.Is(err, ErrLeaseNotObserved) || errors.Is(err, fencing.ErrStaleToken) || !apierrors.IsForbidden(err) {
		t.Errorf("Error(%v) = %v, want ErrLeaseNotObserved wrapping the API error", higher, err)
	}
}

func TestErrorLeavesOtherErrorsAlone(t *testing.T) {
	if Error(nil) != nil {
		t.Fatal("Error(nil) != nil")
	}
	for _, err := range []error{
		errors.New("connection refused"),
		forbidden("missing fencing token: set annotation elector-sidecar.io/fencing-token to ..."),
		apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, "plan", errors.New("changed")),
	} {
		if got := Error(err); got != err {
			t.Errorf("Error(%v) = %v, want it unchanged", err, got)
		}
	}
}

var cmGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

func newFake(t *testing.T, objs ...runtime.Object) (*dynamicfake.FakeDynamicClient, *Client) {
	t.Helper()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{cmGVR: "ConfigMapList"}, objs...)
	return dyn, New(dyn.Resource(cmGVR).Namespace("ns"), "test-writer")
}

func configMap(name, rv string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "namespace": "ns"}, "data": map[string]any{"k": "v"}}}
	if rv != "" {
		u.SetResourceVersion(rv)
	}
	return u
}

func TestClientStampsEveryWrite(t *testing.T) {
	dyn, c := newFake(t, configMap("plan", ""))
	ctx := context.Background()
	if _, err := c.Update(ctx, 3, configMap("plan", "")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Patch(ctx, 4, "plan", types.MergePatchType, []byte(`{"data":{"k":"w"}}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(ctx, 5, configMap("other", "")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Patch(ctx, 4, "plan", types.JSONPatchType, []byte(`[]`)); err == nil {
		t.Error("a JSON patch was sent; it cannot carry the token reliably")
	}
	var seen []string
	for _, a := range dyn.Actions() {
		switch a := a.(type) {
		case k8stesting.CreateAction: // also every UpdateAction: the same method set
			seen = append(seen, a.GetObject().(*unstructured.Unstructured).GetAnnotations()[TokenAnnotation])
		case k8stesting.PatchAction:
			var p struct {
				Metadata struct{ Annotations map[string]string }
			}
			if err := json.Unmarshal(a.GetPatch(), &p); err != nil {
				t.Fatal(err)
			}
			seen = append(seen, p.Metadata.Annotations[TokenAnnotation])
		}
	}
	if fmt.Sprint(seen) != "[3 4 5]" {
		t.Fatalf("tokens sent with update, patch, create: %v", seen)
	}
}

// A status write stamps the object first and then writes the status at the
// resourceVersion the stamp returned; a rejected stamp writes no status.
func TestStatusWritesStampTheObjectFirstAtItsResourceVersion(t *testing.T) {
	dyn, c := newFake(t, configMap("plan", ""))
	var statusRV []string
	dyn.PrependReactor("patch", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.PatchAction)
		if p.GetSubresource() == "" {
			out := configMap("plan", "41")
			Stamp(out, 9)
			return true, out, nil
		}
		var body struct {
			Metadata struct{ ResourceVersion string }
		}
		_ = json.Unmarshal(p.GetPatch(), &body)
		statusRV = append(statusRV, body.Metadata.ResourceVersion)
		return true, configMap("plan", "42"), nil
	})
	dyn.PrependReactor("update", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		statusRV = append(statusRV, a.(k8stesting.UpdateAction).GetObject().(*unstructured.Unstructured).GetResourceVersion())
		return true, configMap("plan", "42"), nil
	})
	ctx := context.Background()
	if _, err := c.UpdateStatus(ctx, 9, configMap("plan", "40")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PatchStatus(ctx, 9, "plan", []byte(`{"status":{"phase":"x"}}`)); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(statusRV) != "[41 41]" {
		t.Fatalf("status writes were sent at resourceVersions %v, want the stamp's 41 each", statusRV)
	}
	stampPatch := dyn.Actions()[0].(k8stesting.PatchAction).GetPatch()
	if want := `{"metadata":{"annotations":{"elector-sidecar.io/fencing-token":"9"},"resourceVersion":"40"}}`; string(stampPatch) != want {
		t.Errorf("UpdateStatus's stamp: %s, want %s (conditional on the object's resourceVersion)", stampPatch, want)
	}

	rejected, c2 := newFake(t, configMap("plan", ""))
	rejected.PrependReactor("patch", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, forbidden("stale fencing token 2: resource already accepted token 9 (configmaps ns/plan, f)")
	})
	_, err := c2.PatchStatus(ctx, 2, "plan", []byte(`{"status":{}}`))
	var stale *fencing.StaleTokenError
	if !errors.As(err, &stale) || stale.Token != 2 || stale.Highest != 9 {
		t.Fatalf("PatchStatus with a stale token: %v", err)
	}
	if n := len(rejected.Actions()); n != 1 {
		t.Fatalf("%d calls after a rejected stamp, want only the stamp", n)
	}
}
