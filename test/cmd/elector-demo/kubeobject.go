package main

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
	"github.com/elector-sidecar/elector-sidecar/pkg/fencing/kubeobject"
)

// fencedLabel is the chart's default fence.objectSelector: only labelled objects are fenced.
const fencedLabel = "elector-sidecar.io/fenced"

// kubeObjectStore is --store kubeobject:<namespace>/<name>: a ConfigMap written with server-side apply
// through pkg/fencing/kubeobject, so the fence is the API server's (the chart's fence
// ValidatingAdmissionPolicy, fence.enabled), not a compare-and-swap of this program. The ConfigMap carries the
// fence's label, the token annotation, and data {value, writer}; a rejection is a *fencing.StaleTokenError
// that also unwraps to the API server's error (whose message names both tokens).
type kubeObjectStore struct {
	objs      *kubeobject.Client
	namespace string
	name      string
	writer    string
}

var configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

func newKubeObjectStore(dyn dynamic.Interface, namespace, name, writer string) *kubeObjectStore {
	return &kubeObjectStore{
		objs:      kubeobject.New(dyn.Resource(configMaps).Namespace(namespace), "elector-demo"),
		namespace: namespace, name: name, writer: writer,
	}
}

// WriteToken applies the ConfigMap with value, stamped with token.Value (the fence compares token values only;
// the Lease UID is the lease guard's business).
func (s *kubeObjectStore) WriteToken(ctx context.Context, token fencing.Token, value []byte) error {
	cm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "ConfigMap",
		"metadata": map[string]any{
			"name":      s.name,
			"namespace": s.namespace,
			"labels":    map[string]any{fencedLabel: "true"},
		},
		"data": map[string]any{"value": string(value), "writer": s.writer},
	}}
	if _, err := s.objs.Apply(ctx, token.Value, cm); err != nil {
		return fmt.Errorf("apply configmap %s/%s: %w", s.namespace, s.name, err)
	}
	return nil
}
