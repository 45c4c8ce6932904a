// Package configmapstore is a fencing.Store backed by a Kubernetes ConfigMap:
// the highest accepted fencing token and the value live in one ConfigMap, and
// the ConfigMap's resourceVersion is the compare-and-swap version, so the
// token check and the write are one atomic update at the apiserver.
//
//	store := configmapstore.New(clientset.CoreV1(), "default", "demo-value")
//	fence := fencing.New(store)
//	err := fence.Write(ctx, token, []byte("hello"))   // errors.Is(err, fencing.ErrStaleToken) if stale
//
// The ConfigMap is created on the first write. Data["fencing-token"] holds the
// highest token; Data["value"] the value (BinaryData["value"] if it is not
// UTF-8). Other keys, labels and annotations are preserved.
package configmapstore

import (
	"context"
	"fmt"
	"strconv"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
)

// Keys in the ConfigMap.
const (
	TokenKey = "fencing-token"
	ValueKey = "value"
)

// Store is a fencing.Store over one ConfigMap.
type Store struct {
	client    corev1client.ConfigMapsGetter
	namespace string
	name      string
}

var _ fencing.Store = (*Store)(nil)

// New returns a Store for the ConfigMap namespace/name (which need not exist yet).
func New(client corev1client.ConfigMapsGetter, namespace, name string) *Store {
	return &Store{client: client, namespace: namespace, name: name}
}

func (s *Store) key() string { return s.namespace + "/" + s.name }

// Load implements fencing.Store. A missing ConfigMap is highest 0, no value,
// version "".
func (s *Store) Load(ctx context.Context) (int64, []byte, string, error) {
	cm, err := s.client.ConfigMaps(s.namespace).Get(ctx, s.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return 0, nil, "", nil
	}
	if err != nil {
		return 0, nil, "", fmt.Errorf("configmap %s: get: %w", s.key(), err)
	}
	highest, err := parseToken(cm)
	if err != nil {
		return 0, nil, "", fmt.Errorf("configmap %s: %w", s.key(), err)
	}
	return highest, valueOf(cm), cm.ResourceVersion, nil
}

// Commit implements fencing.Store: it writes token and value if the ConfigMap
// is still at version (the resourceVersion from Load; "" = does not exist),
// and returns an error matching fencing.ErrConflict if it moved on.
func (s *Store) Commit(ctx context.Context, version string, token int64, value []byte) error {
	cms := s.client.ConfigMaps(s.namespace)
	if version == "" {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: s.namespace}}
		setFields(cm, token, value)
		_, err := cms.Create(ctx, cm, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("configmap %s: created concurrently: %w", s.key(), fencing.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("configmap %s: create: %w", s.key(), err)
		}
		return nil
	}
	cm, err := cms.Get(ctx, s.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("configmap %s: deleted concurrently: %w", s.key(), fencing.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("configmap %s: get: %w", s.key(), err)
	}
	if cm.ResourceVersion != version {
		return fmt.Errorf("configmap %s: at resourceVersion %s, not %s: %w", s.key(), cm.ResourceVersion, version, fencing.ErrConflict)
	}
	// Defence in depth: never record a lower token, even for a caller that skipped Check.
	highest, err := parseToken(cm)
	if err != nil {
		return fmt.Errorf("configmap %s: %w", s.key(), err)
	}
	if err := fencing.Check(highest, token); err != nil {
		return err
	}
	setFields(cm, token, value)
	// The update carries resourceVersion=version: the apiserver rejects it
	// with 409 Conflict if anything changed since, which makes this a CAS.
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return fmt.Errorf("configmap %s: changed concurrently: %v: %w", s.key(), err, fencing.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("configmap %s: update: %w", s.key(), err)
	}
	return nil
}

func parseToken(cm *corev1.ConfigMap) (int64, error) {
	raw, ok := cm.Data[TokenKey]
	if !ok || raw == "" {
		return 0, nil
	}
	t, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || t < 0 {
		return 0, fmt.Errorf("data[%q] = %q is not a non-negative integer", TokenKey, raw)
	}
	return t, nil
}

func valueOf(cm *corev1.ConfigMap) []byte {
	if v, ok := cm.BinaryData[ValueKey]; ok {
		return v
	}
	if v, ok := cm.Data[ValueKey]; ok {
		return []byte(v)
	}
	return nil
}

func setFields(cm *corev1.ConfigMap, token int64, value []byte) {
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[TokenKey] = strconv.FormatInt(token, 10)
	if utf8.Valid(value) {
		cm.Data[ValueKey] = string(value)
		delete(cm.BinaryData, ValueKey)
	} else {
		if cm.BinaryData == nil {
			cm.BinaryData = map[string][]byte{}
		}
		cm.BinaryData[ValueKey] = value
		delete(cm.Data, ValueKey)
	}
}
