// Package configmapstore is a fencing.Store backed by a Kubernetes ConfigMap:
// the highest accepted fencing token, the Lease UID it was issued under, and
// the value live in one ConfigMap, and the ConfigMap's resourceVersion is the
// compare-and-swap version, so the token check and the write are one atomic
// update at the apiserver.
//
//	store := configmapstore.New(clientset.CoreV1(), "default", "demo-value")
//	// once, where the fence is set up (an install step), not on the write path:
//	if _, err := store.Init(ctx); err != nil { ... }
//	fence := fencing.New(store)
//	err := fence.WriteToken(ctx, fencing.Token{Value: t.Token, LeaseUID: t.LeaseUID}, []byte("hello"))
//	// errors.Is(err, fencing.ErrStaleToken) if stale
//
// The ConfigMap is the fence's state, and the store fails closed without it:
// if it does not exist, Load and Commit return an error matching
// ErrStateMissing and nothing is written (a deleted ConfigMap must not read
// as "highest token 0", which would let every stale token in). Whoever sets
// up the fence creates it once: with Init, or by creating the ConfigMap
// (with no data, or Data["fencing-token"] = "0") as part of the install, as
// the Helm chart does for the demo app.
//
// Data["fencing-token"] holds the highest token; Data["fencing-lease-uid"]
// the Lease UID recorded with it (absent if unknown); Data["value"] the value
// (BinaryData["value"] if it is not UTF-8). A ConfigMap without
// "fencing-token" is highest 0. Other keys, labels and annotations are
// preserved.
package configmapstore

import (
	"context"
	"errors"
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
	TokenKey    = "fencing-token"
	LeaseUIDKey = "fencing-lease-uid"
	ValueKey    = "value"
)

// ErrStateMissing is matched (errors.Is) by Load and Commit when the
// ConfigMap does not exist: the fence's state is gone, so no token can be
// checked and nothing is written. Recreate it deliberately (Init), knowing
// that it starts again at highest token 0.
var ErrStateMissing = errors.New("fence state missing")

// Store is a fencing.Store over one ConfigMap.
type Store struct {
	client    corev1client.ConfigMapsGetter
	namespace string
	name      string
}

var _ fencing.Store = (*Store)(nil)

// New returns a Store for the ConfigMap namespace/name. The ConfigMap must
// exist before the first write (see Init); New makes no API call.
func New(client corev1client.ConfigMapsGetter, namespace, name string) *Store {
	return &Store{client: client, namespace: namespace, name: name}
}

func (s *Store) key() string { return s.namespace + "/" + s.name }

func (s *Store) missing(what string) error {
	return fmt.Errorf("configmap %s: %s: %w (it holds the highest accepted fencing token; "+
		"recreating it resets the fence to 0, so only the fence's setup may do that, with Init)", s.key(), what, ErrStateMissing)
}

// Init creates the ConfigMap with highest token 0 if it does not exist, and
// reports whether it did; an existing ConfigMap is left as it is. Call it
// once, where the fence is set up (an install step, a setup job), never on
// the write path: after the ConfigMap was lost, Init starts the fence again
// at 0, and every token the resource rejected before would be accepted.
func (s *Store) Init(ctx context.Context) (created bool, err error) {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: s.namespace},
		Data:       map[string]string{TokenKey: "0"},
	}
	_, err = s.client.ConfigMaps(s.namespace).Create(ctx, cm, metav1.CreateOptions{})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsAlreadyExists(err):
		return false, nil
	default:
		return false, fmt.Errorf("configmap %s: create: %w", s.key(), err)
	}
}

// Load implements fencing.Store. A missing ConfigMap is an error matching
// ErrStateMissing.
func (s *Store) Load(ctx context.Context) (fencing.Token, []byte, string, error) {
	cm, err := s.client.ConfigMaps(s.namespace).Get(ctx, s.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fencing.Token{}, nil, "", s.missing("not found")
	}
	if err != nil {
		return fencing.Token{}, nil, "", fmt.Errorf("configmap %s: get: %w", s.key(), err)
	}
	highest, err := parseToken(cm)
	if err != nil {
		return fencing.Token{}, nil, "", fmt.Errorf("configmap %s: %w", s.key(), err)
	}
	return highest, valueOf(cm), cm.ResourceVersion, nil
}

// Commit implements fencing.Store: it writes token (with its Lease UID) and
// value if the ConfigMap is still at version (the resourceVersion from Load),
// and returns an error matching fencing.ErrConflict if it moved on, or
// ErrStateMissing if it no longer exists. It never creates the ConfigMap.
func (s *Store) Commit(ctx context.Context, version string, token fencing.Token, value []byte) error {
	if version == "" {
		return s.missing("no resourceVersion to commit at")
	}
	cms := s.client.ConfigMaps(s.namespace)
	cm, err := cms.Get(ctx, s.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return s.missing("deleted since it was loaded")
	}
	if err != nil {
		return fmt.Errorf("configmap %s: get: %w", s.key(), err)
	}
	if cm.ResourceVersion != version {
		return fmt.Errorf("configmap %s: at resourceVersion %s, not %s: %w", s.key(), cm.ResourceVersion, version, fencing.ErrConflict)
	}
	// Defence in depth: never record a lower token, or drop the Lease UID of
	// the highest, even for a caller that skipped the check.
	highest, err := parseToken(cm)
	if err != nil {
		return fmt.Errorf("configmap %s: %w", s.key(), err)
	}
	record, err := fencing.Accept(highest, token)
	if err != nil {
		return err
	}
	setFields(cm, record, value)
	// The update carries resourceVersion=version: the apiserver rejects it
	// with 409 Conflict if anything changed since, which makes this a CAS.
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return s.missing("deleted while writing")
	}
	if apierrors.IsConflict(err) {
		return fmt.Errorf("configmap %s: changed concurrently: %v: %w", s.key(), err, fencing.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("configmap %s: update: %w", s.key(), err)
	}
	return nil
}

func parseToken(cm *corev1.ConfigMap) (fencing.Token, error) {
	uid := cm.Data[LeaseUIDKey]
	raw, ok := cm.Data[TokenKey]
	if !ok || raw == "" {
		return fencing.Token{LeaseUID: uid}, nil
	}
	t, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || t < 0 {
		return fencing.Token{}, fmt.Errorf("data[%q] = %q is not a non-negative integer", TokenKey, raw)
	}
	return fencing.Token{Value: t, LeaseUID: uid}, nil
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

func setFields(cm *corev1.ConfigMap, token fencing.Token, value []byte) {
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[TokenKey] = strconv.FormatInt(token.Value, 10)
	if token.LeaseUID != "" {
		cm.Data[LeaseUIDKey] = token.LeaseUID
	} else {
		delete(cm.Data, LeaseUIDKey)
	}
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
