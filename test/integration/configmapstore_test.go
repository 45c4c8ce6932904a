package integration

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
	"github.com/elector-sidecar/elector-sidecar/pkg/fencing/configmapstore"
)

// pkg/fencing/configmapstore against the real apiserver: the fence holds
// across concurrent writers with real resourceVersion compare-and-swap.
func TestConfigMapStoreOnAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns, err := env.cp.CreateNamespace(ctx, "cmstore")
	if err != nil {
		t.Fatal(err)
	}
	store := configmapstore.New(env.cp.Client.CoreV1(), ns, "fenced")
	fence := fencing.New(store)

	// No state yet: the store fails closed until the setup creates it.
	if err := fence.Write(ctx, 1, []byte("one")); !errors.Is(err, configmapstore.ErrStateMissing) {
		t.Fatalf("write before Init: %v, want ErrStateMissing", err)
	}
	if created, err := store.Init(ctx); err != nil || !created {
		t.Fatalf("Init = %v, %v", created, err)
	}
	if err := fence.Write(ctx, 3, []byte("three")); err != nil {
		t.Fatal(err)
	}
	if err := fence.Write(ctx, 2, []byte("two")); !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("write with token 2 after 3: %v, want ErrStaleToken", err)
	}
	// A commit at an outdated resourceVersion loses the CAS.
	_, _, ver, err := store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.Write(ctx, 3, []byte("three again")); err != nil {
		t.Fatal(err)
	}
	if err := store.Commit(ctx, ver, fencing.Token{Value: 4}, []byte("at an old version")); !errors.Is(err, fencing.ErrConflict) {
		t.Fatalf("commit at an old resourceVersion: %v, want ErrConflict", err)
	}

	// Concurrent writers with tokens 4..9: the highest wins, and in the
	// order the apiserver applied them, tokens never go down.
	var wg sync.WaitGroup
	for tok := int64(4); tok <= 9; tok++ {
		wg.Add(1)
		go func(tok int64) {
			defer wg.Done()
			f := fencing.New(configmapstore.New(env.cp.Client.CoreV1(), ns, "fenced"))
			for i := 0; i < 10; i++ {
				if err := f.WriteToken(ctx, fencing.Token{Value: tok, LeaseUID: "uid-a"}, []byte(strconv.FormatInt(tok, 10))); err != nil && !errors.Is(err, fencing.ErrStaleToken) && !errors.Is(err, fencing.ErrConflict) {
					t.Errorf("token %d: %v", tok, err)
					return
				}
			}
		}(tok)
	}
	wg.Wait()
	h, v, _, err := store.Load(ctx)
	if err != nil || h != (fencing.Token{Value: 9, LeaseUID: "uid-a"}) || string(v) != "9" {
		t.Fatalf("final %v %q %v, want {9 uid-a} \"9\"", h, v, err)
	}
	cm, err := env.cp.Client.CoreV1().ConfigMaps(ns).Get(ctx, "fenced", metav1.GetOptions{})
	if err != nil || cm.Data[configmapstore.TokenKey] != "9" || cm.Data[configmapstore.LeaseUIDKey] != "uid-a" {
		t.Fatalf("configmap %v %v", cm.Data, err)
	}
	// The same value under another Lease UID is rejected.
	if err := fence.WriteToken(ctx, fencing.Token{Value: 9, LeaseUID: "uid-b"}, []byte("reissued")); !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("token 9 under another lease UID: %v, want ErrStaleToken", err)
	}

	// Deleting the fence's state does not let a stale token in.
	if err := env.cp.Client.CoreV1().ConfigMaps(ns).Delete(ctx, "fenced", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := fence.Write(ctx, 3, []byte("stale")); !errors.Is(err, configmapstore.ErrStateMissing) {
		t.Fatalf("write with token 3 after the state was deleted: %v, want ErrStateMissing", err)
	}
	if _, err := env.cp.Client.CoreV1().ConfigMaps(ns).Get(ctx, "fenced", metav1.GetOptions{}); err == nil {
		t.Fatal("the rejected write recreated the configmap")
	}
}
