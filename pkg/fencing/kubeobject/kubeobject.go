// Package kubeobject is the app's side of the fence for Kubernetes objects:
// the API server itself rejects a stale leader's writes, for any kind, through
// the chart's fence ValidatingAdmissionPolicy (values fence.*; README
// "Fencing Kubernetes objects"). That policy admits a create or update of a
// fenced object only if the new object carries the annotation
// TokenAnnotation with a fencing token not lower than the stored object's.
//
// This package stamps the current token on every write (update, patch, apply
// and their status forms) and turns the policy's rejection into the same
// error as every other fence: a *fencing.StaleTokenError, matched by
// errors.Is(err, fencing.ErrStaleToken). A rejected write commits nothing.
//
//	objs := kubeobject.New(dyn.Resource(configMaps).Namespace("default"), "my-app")
//	_, err := objs.Update(ctx, t.Token, obj)   // t: the sidecar's /token answer
//	if errors.Is(err, fencing.ErrStaleToken) { // a newer leader wrote this object: stop
//	}
//
// Typed clients work too: Stamp the object (or StampMergePatch a patch)
// before the call and pass the call's error through Error.
//
// Status writes: the API server drops metadata changes sent to a status
// subresource, so a status write cannot carry the token itself. The status
// forms below first stamp the token on the object (a merge patch, judged by
// the policy), then write the status at the resourceVersion that stamp
// returned: if anyone wrote the object in between, the status write fails
// with a conflict, and a stale token fails at the stamp, before any status is
// written.
package kubeobject

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
)

// TokenAnnotation carries the fencing token on a fenced object (the chart's
// default fence.annotation).
const TokenAnnotation = "elector-sidecar.io/fencing-token"

// ErrLeaseNotObserved is matched (errors.Is) when the fence's holder check
// judged a write against an older Lease than the one that issued its token:
// the API server reads the Lease from its own cache, which can lag a
// takeover by a moment. The write was not admitted; retrying it shortly is
// safe. If it lasts for more than a few seconds, the API server's Lease
// informer for admission has stopped (kubernetes/kubernetes#130887, which
// the chart's fence Lease anchor prevents): restart the API servers.
var ErrLeaseNotObserved = errors.New("the fence has not yet observed the lease that issued this token (retry; if it lasts, see kubernetes/kubernetes#130887)")

// Stamp sets TokenAnnotation on obj to token (any typed or unstructured
// object); write obj with the call's error passed through Error.
func Stamp(obj metav1.Object, token int64) {
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[TokenAnnotation] = strconv.FormatInt(token, 10)
	obj.SetAnnotations(a)
}

// StampMergePatch returns patch (a JSON merge patch or strategic merge patch:
// a JSON object; nil or empty for none) with metadata.annotations setting
// TokenAnnotation to token. JSON patches (RFC 6902) are not supported: send
// a merge patch instead.
func StampMergePatch(patch []byte, token int64) ([]byte, error) {
	p := map[string]any{}
	if len(patch) > 0 {
		if err := json.Unmarshal(patch, &p); err != nil {
			return nil, fmt.Errorf("stamp fencing token on patch: not a JSON object: %w", err)
		}
		if p == nil {
			p = map[string]any{}
		}
	}
	md, ok := p["metadata"].(map[string]any)
	if !ok {
		if p["metadata"] != nil {
			return nil, errors.New("stamp fencing token on patch: metadata is not an object")
		}
		md = map[string]any{}
		p["metadata"] = md
	}
	ann, ok := md["annotations"].(map[string]any)
	if !ok {
		if md["annotations"] != nil {
			return nil, errors.New("stamp fencing token on patch: metadata.annotations is not an object")
		}
		ann = map[string]any{}
		md["annotations"] = ann
	}
	ann[TokenAnnotation] = strconv.FormatInt(token, 10)
	return json.Marshal(p)
}

// The fence policy's messages (charts/elector-sidecar/templates/fence-policy.yaml).
var (
	staleRe  = regexp.MustCompile(`stale fencing token (\d+): resource already accepted token (\d+)`)
	holderRe = regexp.MustCompile(`fencing token (\d+) from pod (\S*) is not lease \S+ \(token (\d+), held by (\S*)\)`)
)

// Error turns the fence policy's rejection of a write into the error every
// fence returns: a *fencing.StaleTokenError (errors.Is(err,
// fencing.ErrStaleToken)) naming the rejected token and the one the object
// (or, with the holder check, the Lease) holds; the API error stays
// reachable with errors.As. A holder-check rejection of a token higher than
// the Lease the API server has cached matches ErrLeaseNotObserved instead.
// Any other error (nil too) is returned unchanged.
func Error(err error) error {
	var status apierrors.APIStatus
	if err == nil || !errors.As(err, &status) {
		return err
	}
	msg := status.Status().Message
	if m := staleRe.FindStringSubmatch(msg); m != nil {
		return &rejection{stale: staleError(m[1], m[2]), api: err}
	}
	if m := holderRe.FindStringSubmatch(msg); m != nil {
		tok, _ := strconv.ParseInt(m[1], 10, 64)
		lease, _ := strconv.ParseInt(m[3], 10, 64)
		if tok > lease {
			return fmt.Errorf("%w: %w", ErrLeaseNotObserved, err)
		}
		return &rejection{stale: &fencing.StaleTokenError{Token: tok, Highest: lease}, api: err}
	}
	return err
}

func staleError(token, highest string) *fencing.StaleTokenError {
	t, _ := strconv.ParseInt(token, 10, 64)
	h, _ := strconv.ParseInt(highest, 10, 64)
	return &fencing.StaleTokenError{Token: t, Highest: h}
}

// rejection is a *fencing.StaleTokenError that also unwraps to the API error.
type rejection struct {
	stale *fencing.StaleTokenError
	api   error
}

func (r *rejection) Error() string   { return r.stale.Error() + " (" + r.api.Error() + ")" }
func (r *rejection) Unwrap() []error { return []error{r.stale, r.api} }

// Client writes objects of one resource (one namespace) through a dynamic
// client, stamping the token on each write.
type Client struct {
	res          dynamic.ResourceInterface
	fieldManager string
}

// New returns a Client over res (dyn.Resource(gvr).Namespace(ns)).
// fieldManager names the writer for server-side apply (and every other write).
func New(res dynamic.ResourceInterface, fieldManager string) *Client {
	return &Client{res: res, fieldManager: fieldManager}
}

// Create creates obj stamped with token.
func (c *Client) Create(ctx context.Context, token int64, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	obj = obj.DeepCopy()
	Stamp(obj, token)
	out, err := c.res.Create(ctx, obj, metav1.CreateOptions{FieldManager: c.fieldManager})
	return out, Error(err)
}

// Update replaces obj stamped with token. obj's resourceVersion, if set, is
// the usual compare-and-swap precondition.
func (c *Client) Update(ctx context.Context, token int64, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	obj = obj.DeepCopy()
	Stamp(obj, token)
	out, err := c.res.Update(ctx, obj, metav1.UpdateOptions{FieldManager: c.fieldManager})
	return out, Error(err)
}

// Patch applies a JSON merge patch (types.MergePatchType) or strategic merge
// patch (built-in kinds) stamped with token.
func (c *Client) Patch(ctx context.Context, token int64, name string, pt types.PatchType, patch []byte) (*unstructured.Unstructured, error) {
	if pt != types.MergePatchType && pt != types.StrategicMergePatchType {
		return nil, fmt.Errorf("fenced patch of %s: patch type %s is not supported (use a merge patch)", name, pt)
	}
	stamped, err := StampMergePatch(patch, token)
	if err != nil {
		return nil, err
	}
	out, err := c.res.Patch(ctx, name, pt, stamped, metav1.PatchOptions{FieldManager: c.fieldManager})
	return out, Error(err)
}

// Apply is a server-side apply of obj, stamped with token, as the Client's
// field manager (force: the fenced writer owns what it applies).
func (c *Client) Apply(ctx context.Context, token int64, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	obj = obj.DeepCopy()
	Stamp(obj, token)
	out, err := c.res.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: c.fieldManager, Force: true})
	return out, Error(err)
}

// stampAt stamps token on the object name with a merge patch, conditional on
// resourceVersion if it is set, and returns the new resourceVersion.
func (c *Client) stampAt(ctx context.Context, token int64, name, resourceVersion string) (string, error) {
	md := map[string]any{"annotations": map[string]string{TokenAnnotation: strconv.FormatInt(token, 10)}}
	if resourceVersion != "" {
		md["resourceVersion"] = resourceVersion
	}
	patch, err := json.Marshal(map[string]any{"metadata": md})
	if err != nil {
		return "", err
	}
	out, err := c.res.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: c.fieldManager})
	if err != nil {
		return "", Error(err)
	}
	return out.GetResourceVersion(), nil
}

// UpdateStatus writes obj's status: it stamps token on the object (at obj's
// resourceVersion, if set), then updates the status at the resourceVersion
// the stamp returned. A stale token fails at the stamp; a write by anyone
// else in between fails the status update with a conflict.
func (c *Client) UpdateStatus(ctx context.Context, token int64, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	rv, err := c.stampAt(ctx, token, obj.GetName(), obj.GetResourceVersion())
	if err != nil {
		return nil, err
	}
	obj = obj.DeepCopy()
	Stamp(obj, token)
	obj.SetResourceVersion(rv)
	out, err := c.res.UpdateStatus(ctx, obj, metav1.UpdateOptions{FieldManager: c.fieldManager})
	return out, Error(err)
}

// PatchStatus merge-patches the status subresource: it stamps token on the
// object, then sends patch with the stamp's resourceVersion as precondition.
func (c *Client) PatchStatus(ctx context.Context, token int64, name string, patch []byte) (*unstructured.Unstructured, error) {
	rv, err := c.stampAt(ctx, token, name, "")
	if err != nil {
		return nil, err
	}
	p := map[string]any{}
	if len(patch) > 0 {
		if err := json.Unmarshal(patch, &p); err != nil || p == nil {
			return nil, fmt.Errorf("fenced status patch of %s: not a JSON object", name)
		}
	}
	md, _ := p["metadata"].(map[string]any)
	if md == nil {
		md = map[string]any{}
	}
	md["resourceVersion"] = rv
	p["metadata"] = md
	body, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	out, err := c.res.Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: c.fieldManager}, "status")
	return out, Error(err)
}

// ApplyStatus is a server-side apply of obj's status: it stamps token on the
// object, then applies with the stamp's resourceVersion as precondition.
func (c *Client) ApplyStatus(ctx context.Context, token int64, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	rv, err := c.stampAt(ctx, token, obj.GetName(), "")
	if err != nil {
		return nil, err
	}
	obj = obj.DeepCopy()
	obj.SetResourceVersion(rv)
	out, err := c.res.ApplyStatus(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: c.fieldManager, Force: true})
	return out, Error(err)
}
