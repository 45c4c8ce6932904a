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

func TestLoadMissing(t *testing.T) {
	s := New(casClient().CoreV1(), "ns", "cm")
	h, v, ver, err := s.Load(context.Background())
	if err != nil || h != 0 || v != nil || ver != "" {
		t.Fatalf("Load = %d %q %q %v, want 0 nil \"\" nil", h, v, ver, err)
	}
}

func TestFenceSequence(t *testing.T) {
	ctx := context.Background()
	cs := casClient()
	s := New(cs.CoreV1(), "ns", "cm")
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
		if err != nil || h != st.wantHigh || string(v) != st.wantValue {
			t.Fatalf("step %d: Load = %d %q %v, want %d %q", i, h, v, err, st.wantHigh, st.wantValue)
		}
	}
	cm, _ := cs.CoreV1().ConfigMaps("ns").Get(ctx, "cm", metav1.GetOptions{})
	if cm.Data[TokenKey] != "5" || cm.Data[ValueKey] != "text again" || len(cm.BinaryData) != 0 {
		t.Fatalf("configmap data %v binary %v", cm.Data, cm.BinaryData)
	}
}

func TestCommitConflicts(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		setup func(s *Store, cs *fake.Clientset) string // returns the version to commit at
	}{
		{"create races create", func(s *Store, cs *fake.Clientset) string {
			_ = s.Commit(ctx, "", 1, []byte("other"))
			return ""
		}},
		{"update after another update", func(s *Store, cs *fake.Clientset) string {
			_ = s.Commit(ctx, "", 1, []byte("x"))
			_, _, ver, _ := s.Load(ctx)
			_ = s.Commit(ctx, ver, 1, []byte("y"))
			return ver
		}},
		{"deleted since load", func(s *Store, cs *fake.Clientset) string {
			_ = s.Commit(ctx, "", 1, []byte("x"))
			_, _, ver, _ := s.Load(ctx)
			_ = cs.CoreV1().ConfigMaps("ns").Delete(ctx, "cm", metav1.DeleteOptions{})
			return ver
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := casClient()
			s := New(cs.CoreV1(), "ns", "cm")
			ver := tt.setup(s, cs)
			if err := s.Commit(ctx, ver, 3, []byte("mine")); !errors.Is(err, fencing.ErrConflict) {
				t.Fatalf("Commit = %v, want ErrConflict", err)
			}
		})
	}
}

func TestCommitRejectsLowerToken(t *testing.T) {
	ctx := context.Background()
	s := New(casClient().CoreV1(), "ns", "cm")
	if err := s.Commit(ctx, "", 7, []byte("x")); err != nil {
		t.Fatal(err)
	}
	_, _, ver, _ := s.Load(ctx)
	if err := s.Commit(ctx, ver, 6, []byte("y")); !errors.Is(err, fencing.ErrStaleToken) {
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
	s := New(casClient().CoreV1(), "ns", "cm")
	f := fencing.New(s)
	var wg sync.WaitGroup
	for tok := int64(1); tok <= 6; tok++ {
		wg.Add(1)
		go func(tok int64) {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				err := f.Write(ctx, tok, []byte(strconv.FormatInt(tok, 10)))
				if err != nil && !errors.Is(err, fencing.ErrStaleToken) && !errors.Is(err, fencing.ErrConflict) {
					t.Errorf("token %d: %v", tok, err)
					return
				}
			}
		}(tok)
	}
	wg.Wait()
	h, v, _, err := s.Load(ctx)
	if err != nil || h != 6 || string(v) != "6" {
		t.Fatalf("final %d %q %v, want 6 \"6\"", h, v, err)
	}
}
