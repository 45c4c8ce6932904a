package configmapstore

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
)

// casClient returns a fake clientset whose ConfigMaps behave like the
// apiserver's: a resourceVersion bumped on every write, and an update with a
// stale resourceVersion rejected with 409 Conflict. (The stock fake tracker
// does not check resourceVersions.)
func casClient() *fake.Clientset {
	cs := fake.NewClientset()
	var mu sync.Mutex
	objs := map[string]*corev1.ConfigMap{}
	rv := 100
	gr := schema.GroupResource{Resource: "configmaps"}
	key := func(ns, name string) string { return ns + "/" + name }
	cs.PrependReactor("*", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		switch a.GetVerb() {
		case "get":
			a := a.(k8stesting.GetAction)
			cm, ok := objs[key(a.GetNamespace(), a.GetName())]
			if !ok {
				return true, nil, apierrors.NewNotFound(gr, a.GetName())
			}
			return true, cm.DeepCopy(), nil
		case "create":
			a := a.(k8stesting.CreateAction)
			cm := a.GetObject().(*corev1.ConfigMap).DeepCopy()
			k := key(a.GetNamespace(), cm.Name)
			if _, ok := objs[k]; ok {
				return true, nil, apierrors.NewAlreadyExists(gr, cm.Name)
			}
			rv++
			cm.ResourceVersion = strconv.Itoa(rv)
			objs[k] = cm
			return true, cm.DeepCopy(), nil
		case "update":
			a := a.(k8stesting.UpdateAction)
			cm := a.GetObject().(*corev1.ConfigMap).DeepCopy()
			k := key(a.GetNamespace(), cm.Name)
			cur, ok := objs[k]
			if !ok {
				return true, nil, apierrors.NewNotFound(gr, cm.Name)
			}
			if cm.ResourceVersion != cur.ResourceVersion {
				return true, nil, apierrors.NewConflict(gr, cm.Name, errors.New("the object has been modified"))
			}
			rv++
			cm.ResourceVersion = strconv.Itoa(rv)
			objs[k] = cm
			return true, cm.DeepCopy(), nil
		case "delete":
			a := a.(k8stesting.DeleteAction)
			delete(objs, key(a.GetNamespace(), a.GetName()))
			return true, nil, nil
		}
		return false, nil, nil
	})
	return cs
}

// initStore returns a Store on a fresh casClient whose ConfigMap was
// created by Init, as the fence's setup does.
func initStore(t *testing.T) (*Store, *fake.Clientset) {
	t.Helper()
	cs := casClient()
	s := New(cs.CoreV1(), "ns", "cm")
	if created, err := s.Init(context.Background()); err != nil || !created {
		t.Fatalf("Init = %v, %v; want created", created, err)
	}
	return s, cs
}

func TestLoadMissingFailsClosed(t *testing.T) {
	ctx := context.Background()
	s := New(casClient().CoreV1(), "ns", "cm")
	h, v, ver, err := s.Load(ctx)
	if !errors.Is(err, ErrStateMissing) || h != (fencing.Token{}) || v != nil || ver != "" {
		t.Fatalf("Load = %v %q %q %v, want ErrStateMissing", h, v, ver, err)
	}
	if err := s.Commit(ctx, "", fencing.Token{Value: 1}, []byte("x")); !errors.Is(err, ErrStateMissing) {
		t.Fatalf("Commit at version \"\" = %v, want ErrStateMissing", err)
	}
	err = fencing.New(s).Write(ctx, 1, []byte("x"))
	if !errors.Is(err, ErrStateMissing) || errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("Write without state = %v, want ErrStateMissing", err)
	}
	if _, _, _, err := s.Load(ctx); !errors.Is(err, ErrStateMissing) {
		t.Fatalf("a failed write created the state: Load = %v", err)
	}
}

func TestInit(t *testing.T) {
	ctx := context.Background()
	s, cs := initStore(t)
	h, v, ver, err := s.Load(ctx)
	if err != nil || h != (fencing.Token{}) || v != nil || ver == "" {
		t.Fatalf("Load after Init = %v %q %q %v, want highest 0, no value", h, v, ver, err)
	}
	if err := fencing.New(s).WriteToken(ctx, fencing.Token{Value: 4, LeaseUID: "uid-1"}, []byte("v")); err != nil {
		t.Fatal(err)
	}
	// Init again (a setup step re-run) leaves the state alone.
	if created, err := s.Init(ctx); err != nil || created {
		t.Fatalf("second Init = %v, %v; want not created", created, err)
	}
	if h, v, _, err := s.Load(ctx); err != nil || h != (fencing.Token{Value: 4, LeaseUID: "uid-1"}) || string(v) != "v" {
		t.Fatalf("Load after second Init = %v %q %v", h, v, err)
	}
	// A ConfigMap created without data (as the chart renders it) is highest 0.
	_, _ = cs.CoreV1().ConfigMaps("ns").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "empty", Namespace: "ns"}}, metav1.CreateOptions{})
	if h, _, _, err := New(cs.CoreV1(), "ns", "empty").Load(ctx); err != nil || h != (fencing.Token{}) {
		t.Fatalf("Load of an empty ConfigMap = %v %v, want highest 0", h, err)
	}
}

// TestDeletedStateFailsClosed (R3): the ConfigMap is deleted after token 7
// was accepted; a write with token 3 must fail, and commit nothing (no
// ConfigMap is created, none is updated).
func TestDeletedStateFailsClosed(t *testing.T) {
	ctx := context.Background()
	s, cs := initStore(t)
	f := fencing.New(s)
	if err := f.Write(ctx, 7, []byte("seven")); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().ConfigMaps("ns").Delete(ctx, "cm", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cs.ClearActions()
	for _, write := range []func() error{
		func() error { return f.Write(ctx, 3, []byte("stale")) },
		func() error { return f.WriteToken(ctx, fencing.Token{Value: 3, LeaseUID: "uid-2"}, []byte("stale")) },
	} {
		err := write()
		if err == nil {
			t.Fatal("write with token 3 after the fence state was deleted was accepted")
		}
		if !errors.Is(err, ErrStateMissing) {
			t.Fatalf("write with token 3 = %v, want ErrStateMissing", err)
		}
	}
	for _, a := range cs.Actions() {
		if a.GetVerb() != "get" {
			t.Errorf("write after the deletion made a %s call: %v", a.GetVerb(), a)
		}
	}
	if _, err := cs.CoreV1().ConfigMaps("ns").Get(ctx, "cm", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("configmap after the rejected writes: %v, want still not found", err)
	}
}

func TestFenceSequence(t *testing.T) {
	ctx := context.Background()
	s, cs := initStore(t)
	f := fencing.New(s)
	steps := []struct {
		token     int64
		value     []byte
		wantStale bool
		wantValue string
		wantHigh  int64
	}{
		{token: 2, value: []byte("a"), wantValue: "a", wantHigh: 2},
		{token: 2, value: []byte("b"), wantValue: "b", wantHigh: 2},
		{token: 1, value: []byte("stale"), wantStale: true, wantValue: "b", wantHigh: 2},
		{token: 5, value: []byte{0xff, 0xfe}, wantValue: "\xff\xfe", wantHigh: 5},
		{token: 5, value: []byte("text again"), wantValue: "text again", wantHigh: 5},
		{token: 4, value: []byte("stale"), wantStale: true, wantValue: "text again", wantHigh: 5},
	}
	for i, st := range steps {
		err := f.Write(ctx, st.token, st.value)
		if st.wantStale != errors.Is(err, fencing.ErrStaleToken) || (!st.wantStale && err != nil) {
			t.Fatalf("step %d: Write(%d) = %v, want stale=%v", i, st.token, err, st.wantStale)
		}
		h, v, _, err := s.Load(ctx)
		if err != nil || h.Value != st.wantHigh || h.LeaseUID != "" || string(v) != st.wantValue {
			t.Fatalf("step %d: Load = %v %q %v, want %d %q", i, h, v, err, st.wantHigh, st.wantValue)
		}
	}
	cm, _ := cs.CoreV1().ConfigMaps("ns").Get(ctx, "cm", metav1.GetOptions{})
	if cm.Data[TokenKey] != "5" || cm.Data[ValueKey] != "text again" || len(cm.BinaryData) != 0 {
		t.Fatalf("configmap data %v binary %v", cm.Data, cm.BinaryData)
	}
	if _, ok := cm.Data[LeaseUIDKey]; ok {
		t.Fatalf("configmap has %s without a UID-aware write: %v", LeaseUIDKey, cm.Data)
	}
}

// TestLeaseUIDRoundTrip: the Lease UID is stored next to the token, read
// back by Load, and enforced; a higher token without a UID removes it.
func TestLeaseUIDRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, cs := initStore(t)
	f := fencing.New(s)
	steps := []struct {
		token     fencing.Token
		wantStale bool
		wantHigh  fencing.Token
	}{
		{token: fencing.Token{Value: 7, LeaseUID: "uid-1"}, wantHigh: fencing.Token{Value: 7, LeaseUID: "uid-1"}},
		{token: fencing.Token{Value: 7, LeaseUID: "uid-2"}, wantStale: true, wantHigh: fencing.Token{Value: 7, LeaseUID: "uid-1"}},
		{token: fencing.Token{Value: 7}, wantHigh: fencing.Token{Value: 7, LeaseUID: "uid-1"}},
		{token: fencing.Token{Value: 8, LeaseUID: "uid-2"}, wantHigh: fencing.Token{Value: 8, LeaseUID: "uid-2"}},
		{token: fencing.Token{Value: 9}, wantHigh: fencing.Token{Value: 9}},
	}
	for i, st := range steps {
		err := f.WriteToken(ctx, st.token, []byte(st.token.String()))
		if st.wantStale != errors.Is(err, fencing.ErrStaleToken) || (!st.wantStale && err != nil) {
			t.Fatalf("step %d: WriteToken(%v) = %v, want stale=%v", i, st.token, err, st.wantStale)
		}
		h, _, _, err := s.Load(ctx)
		if err != nil || h != st.wantHigh {
			t.Fatalf("step %d: Load = %v %v, want %v", i, h, err, st.wantHigh)
		}
		cm, _ := cs.CoreV1().ConfigMaps("ns").Get(ctx, "cm", metav1.GetOptions{})
		if cm.Data[TokenKey] != strconv.FormatInt(st.wantHigh.Value, 10) || cm.Data[LeaseUIDKey] != st.wantHigh.LeaseUID {
			t.Fatalf("step %d: configmap data %v, want %v", i, cm.Data, st.wantHigh)
		}
	}
	// A caller that commits directly, skipping the fence, cannot drop the UID either.
	_ = f.WriteToken(ctx, fencing.Token{Value: 10, LeaseUID: "uid-3"}, []byte("ten"))
	_, _, ver, _ := s.Load(ctx)
	if err := s.Commit(ctx, ver, fencing.Token{Value: 10}, []byte("ten again")); err != nil {
		t.Fatal(err)
	}
	if h, v, _, _ := s.Load(ctx); h != (fencing.Token{Value: 10, LeaseUID: "uid-3"}) || string(v) != "ten again" {
		t.Fatalf("after a UID-less commit: %v %q, want {10 uid-3}", h, v)
	}
}

func TestCommitConflicts(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		setup   func(s *Store, cs *fake.Clientset) string // returns the version to commit at
		wantErr error
	}{
		{"update after another update", func(s *Store, cs *fake.Clientset) string {
			_, _, ver, _ := s.Load(ctx)
			_ = s.Commit(ctx, ver, fencing.Token{Value: 1}, []byte("x"))
			_, _, ver, _ = s.Load(ctx)
			_ = s.Commit(ctx, ver, fencing.Token{Value: 1}, []byte("y"))
			return ver
		}, fencing.ErrConflict},
		{"deleted since load", func(s *Store, cs *fake.Clientset) string {
			_, _, ver, _ := s.Load(ctx)
			_ = s.Commit(ctx, ver, fencing.Token{Value: 1}, []byte("x"))
			_, _, ver, _ = s.Load(ctx)
			_ = cs.CoreV1().ConfigMaps("ns").Delete(ctx, "cm", metav1.DeleteOptions{})
			return ver
		}, ErrStateMissing},
		{"no version", func(s *Store, cs *fake.Clientset) string { return "" }, ErrStateMissing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, cs := initStore(t)
			ver := tt.setup(s, cs)
			if err := s.Commit(ctx, ver, fencing.Token{Value: 3}, []byte("mine")); !errors.Is(err, tt.wantErr) {
				t.Fatalf("Commit = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func TestCommitRejectsLowerToken(t *testing.T) {
	ctx := context.Background()
	s, _ := initStore(t)
	_, _, ver, _ := s.Load(ctx)
	if err := s.Commit(ctx, ver, fencing.Token{Value: 7}, []byte("x")); err != nil {
		t.Fatal(err)
	}
	_, _, ver, _ = s.Load(ctx)
	if err := s.Commit(ctx, ver, fencing.Token{Value: 6}, []byte("y")); !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("Commit(6) over 7 = %v, want ErrStaleToken", err)
	}
}

func TestPreservesOtherKeysAndBadToken(t *testing.T) {
	ctx := context.Background()
	cs := casClient()
	_, _ = cs.CoreV1().ConfigMaps("ns").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "ns", Labels: map[string]string{"app": "demo"}},
		Data:       map[string]string{"other": "keep", TokenKey: "3"},
	}, metav1.CreateOptions{})
	s := New(cs.CoreV1(), "ns", "cm")
	if err := fencing.New(s).Write(ctx, 3, []byte("v")); err != nil {
		t.Fatal(err)
	}
	cm, _ := cs.CoreV1().ConfigMaps("ns").Get(ctx, "cm", metav1.GetOptions{})
	if cm.Data["other"] != "keep" || cm.Labels["app"] != "demo" {
		t.Fatalf("lost other data: %v %v", cm.Data, cm.Labels)
	}
	cm.Data[TokenKey] = "garbage"
	_, _ = cs.CoreV1().ConfigMaps("ns").Update(ctx, cm, metav1.UpdateOptions{})
	if _, _, _, err := s.Load(ctx); err == nil {
		t.Fatal("Load with a garbage token succeeded")
	}
}

func TestConcurrentFencedWriters(t *testing.T) {
	ctx := context.Background()
	s, _ := initStore(t)
	f := fencing.New(s)
	var wg sync.WaitGroup
	for tok := int64(1); tok <= 6; tok++ {
		wg.Add(1)
		go func(tok int64) {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				err := f.WriteToken(ctx, fencing.Token{Value: tok, LeaseUID: "uid"}, []byte(strconv.FormatInt(tok, 10)))
				if err != nil && !errors.Is(err, fencing.ErrStaleToken) && !errors.Is(err, fencing.ErrConflict) {
					t.Errorf("token %d: %v", tok, err)
					return
				}
			}
		}(tok)
	}
	wg.Wait()
	h, v, _, err := s.Load(ctx)
	if err != nil || h != (fencing.Token{Value: 6, LeaseUID: "uid"}) || string(v) != "6" {
		t.Fatalf("final %v %q %v, want 6 \"6\"", h, v, err)
	}
}
