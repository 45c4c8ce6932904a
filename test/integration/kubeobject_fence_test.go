package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
	"github.com/elector-sidecar/elector-sidecar/pkg/fencing/kubeobject"
	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// staleWriteCount is the paused leader's writes per object after it resumes.
const staleWriteCount = 1000

// A real election: the leader writes a ConfigMap and a Widget (and its
// status) through the fence, is paused (SIGSTOP) past its lease, the new
// leader writes each once, and the paused one resumes and sends 1,000
// updates, patches and applies to the ConfigMap and to the Widget's status
// with the token it held. The API server admits none, each rejection names
// both tokens, and both objects keep the new leader's value. Again with the
// holder check, where the resumed leader's unstamped writes are refused too.
func TestKubeObjectFenceRejectsEveryWriteOfAPausedLeader(t *testing.T) {
	for _, holder := range []bool{false, true} {
		t.Run(fmt.Sprintf("holderCheck=%v", holder), func(t *testing.T) {
			g := newGroup(t, testTimings)
			g.start("pod-a", "pod-b")
			old, oldTok := g.waitLeader(startupTimeout)
			f := installFence(t, g.ctx, g.namespace, g.lease, holder)
			kinds := []schema.GroupVersionResource{configMapsGVR, widgetsGVR}

			for _, gvr := range kinds {
				w := f.writer(old.Identity(), gvr)
				created, err := w.Create(g.ctx, oldTok.Token, withPlan(fencedObject(gvr, "plan", nil), "by "+old.Identity()))
				if err != nil {
					t.Fatalf("the leader %s creates %s with token %d: %v", old.Identity(), gvr.Resource, oldTok.Token, err)
				}
				if gvr == widgetsGVR {
					if _, err := w.UpdateStatus(g.ctx, oldTok.Token, withPlan(created, "by "+old.Identity())); err != nil {
						t.Fatalf("the leader writes the widget's status: %v", err)
					}
				}
			}

			if err := old.Pause(); err != nil {
				t.Fatal(err)
			}
			resumed := false
			defer func() {
				if !resumed {
					_ = old.Resume()
				}
			}()
			next, newTok := g.waitLeader(testTimings.LeaseDuration+failoverSlack, old)
			for _, gvr := range kinds {
				w := f.writer(next.Identity(), gvr)
				// With the holder check the apiserver may still judge by the
				// Lease it cached before the takeover: retry that, only that.
				f.waitFor("the new leader's write of "+gvr.Resource, func(ctx context.Context) error {
					var err error
					if gvr == configMapsGVR {
						_, err = w.Update(ctx, newTok.Token, withPlan(f.get(gvr, "plan"), "by "+next.Identity()))
					} else {
						_, err = w.UpdateStatus(ctx, newTok.Token, withPlan(f.get(gvr, "plan"), "by "+next.Identity()))
					}
					if err != nil && !errors.Is(err, kubeobject.ErrLeaseNotObserved) {
						t.Fatalf("the new leader %s's write with token %d: %v", next.Identity(), newTok.Token, err)
					}
					return err
				})
			}
			if err := old.Resume(); err != nil {
				t.Fatal(err)
			}
			resumed = true

			for _, gvr := range kinds {
				before := f.get(gvr, "plan")
				start := time.Now()
				admitted, errs := staleWrites(g.ctx, f.writer(old.Identity(), gvr), before, oldTok.Token, staleWriteCount, 8)
				elapsed := time.Since(start)
				if admitted != 0 {
					t.Errorf("%s: %d of the paused leader's %d writes with token %d were admitted after token %d", gvr.Resource, admitted, staleWriteCount, oldTok.Token, newTok.Token)
				}
				checkStaleRejections(t, errs, oldTok.Token, newTok.Token)
				after := f.get(gvr, "plan")
				if after.GetResourceVersion() != before.GetResourceVersion() || planOf(after) != "by "+next.Identity() {
					t.Errorf("%s changed under rejected writes: resourceVersion %s -> %s, plan %q", gvr.Resource, before.GetResourceVersion(), after.GetResourceVersion(), planOf(after))
				}
				t.Logf("%s: %d updates, patches and applies with token %d after token %d: %d admitted, %d rejected as stale, in %v",
					gvr.Resource, staleWriteCount, oldTok.Token, newTok.Token, admitted, len(errs), elapsed.Round(time.Millisecond))
			}

			// A writer that does not stamp: a patch without the annotation
			// keeps the stored token. The base rule admits it (it cannot tell
			// it from the holder re-writing); the holder check refuses it.
			raw := f.as(old.Identity()).Resource(configMapsGVR).Namespace(f.ns)
			_, err := raw.Patch(g.ctx, "plan", types.MergePatchType, []byte(`{"data":{"plan":"unstamped"}}`), metav1.PatchOptions{})
			rawStatus := f.as(old.Identity()).Resource(widgetsGVR).Namespace(f.ns)
			_, statusErr := rawStatus.Patch(g.ctx, "plan", types.MergePatchType, []byte(`{"status":{"plan":"unstamped"}}`), metav1.PatchOptions{}, "status")
			if holder {
				for _, e := range []error{err, statusErr} {
					if !errors.Is(kubeobject.Error(e), fencing.ErrStaleToken) {
						t.Errorf("with the holder check, an unstamped write of the former leader: %v, want a stale-token rejection", e)
					}
				}
			} else if err != nil || statusErr != nil {
				t.Errorf("without the holder check, unstamped writes are judged by the stored token and admitted (README); got %v, %v", err, statusErr)
			}
		})
	}
}

// The holder check's window: the API server reads the Lease (the policy's
// parameter) from its informer cache, so right after a takeover it may judge
// a write against the old Lease. Each round hands the Lease to the other pod
// and then writes (dry run) as the new holder with its new token until one
// is admitted, and as the old holder with its old token until one is
// rejected; the window is the later of the two, from the Lease update's
// response. Past it, the old holder is always rejected.
func TestKubeObjectFenceHolderCheckWindowAfterATakeover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns, err := env.cp.CreateNamespace(ctx, "fence-window")
	if err != nil {
		t.Fatal(err)
	}
	leases := env.cp.Client.CoordinationV1().Leases(ns)
	holder, transitions := "pod-0", int32(1)
	lease, err := leases.Create(ctx, leaseObject("leader", holder, transitions), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f := installFence(t, ctx, ns, "leader", true)
	if _, err := f.writer(holder, configMapsGVR).Create(ctx, int64(transitions), fencedObject(configMapsGVR, "plan", nil)); err != nil {
		t.Fatalf("first write of the holder: %v", err)
	}
	const rounds = 40
	var windows []time.Duration
	oldAdmitted := 0
	for i := 0; i < rounds; i++ {
		prev, prevTok := holder, int64(transitions)
		holder, transitions = fmt.Sprintf("pod-%d", (i+1)%2), transitions+1
		lease.Spec.HolderIdentity, lease.Spec.LeaseTransitions = &holder, &transitions
		if lease, err = leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		updated := time.Now()
		cur := f.get(configMapsGVR, "plan")
		newW := f.writer(holder, configMapsGVR)
		newRes, oldRes := f.as(holder).Resource(configMapsGVR).Namespace(ns), f.as(prev).Resource(configMapsGVR).Namespace(ns)
		var newAt, oldAt time.Duration
		for newAt == 0 || oldAt == 0 {
			if time.Since(updated) > 30*time.Second {
				t.Fatalf("round %d: the holder check still judged by the Lease before the takeover 30s after it (new holder admitted: %v, "+
					"old holder rejected: %v): the API server's Lease informer for admission has stopped (kubernetes/kubernetes#130887; "+
					"the fence's Lease anchor should have prevented it)", i, newAt != 0, oldAt != 0)
			}
			if newAt == 0 {
				err := dryRunUpdate(ctx, newRes, int64(transitions), cur)
				switch {
				case err == nil:
					newAt = time.Since(updated)
				case !errors.Is(err, kubeobject.ErrLeaseNotObserved):
					t.Fatalf("round %d: the new holder %s with token %d: %v", i, holder, transitions, err)
				}
			}
			if oldAt == 0 {
				err := dryRunUpdate(ctx, oldRes, prevTok, cur)
				switch {
				case err == nil:
					oldAdmitted++
				case errors.Is(err, fencing.ErrStaleToken):
					oldAt = time.Since(updated)
				default:
					t.Fatalf("round %d: the old holder %s with token %d: %v", i, prev, prevTok, err)
				}
			}
		}
		if err := dryRunUpdate(ctx, oldRes, prevTok, cur); !errors.Is(err, fencing.ErrStaleToken) {
			t.Fatalf("round %d: the old holder was admitted again after the fence saw the takeover: %v", i, err)
		}
		windows = append(windows, max(newAt, oldAt))
		// The real write, so the stored token follows the Lease.
		if _, err := newW.Update(ctx, int64(transitions), cur); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
	}
	sort.Slice(windows, func(a, b int) bool { return windows[a] < windows[b] })
	p50, worst := windows[len(windows)/2], windows[len(windows)-1]
	t.Logf("holder check window over %d takeovers (Lease update response -> the fence judges by the new Lease): p50 %v, max %v; "+
		"old holder's dry-run writes admitted inside the windows: %d", rounds, p50.Round(time.Microsecond), worst.Round(time.Microsecond), oldAdmitted)
	if worst > 5*time.Second {
		t.Errorf("the holder check's window reached %v (> 5s)", worst)
	}
}

// dryRunUpdate sends cur stamped with token as a dry-run update (admission
// runs, nothing is stored) and returns kubeobject.Error of the result.
func dryRunUpdate(ctx context.Context, res dynamic.ResourceInterface, token int64, cur *unstructured.Unstructured) error {
	obj := cur.DeepCopy()
	kubeobject.Stamp(obj, token)
	obj.SetResourceVersion("")
	_, err := res.Update(ctx, obj, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
	return kubeobject.Error(err)
}

func leaseObject(name, holder string, transitions int32) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseTransitions: &transitions, LeaseDurationSeconds: ptr.To[int32](15)},
	}
}

// The base rule at its edges, on one fence without sidecars (tokens are
// chosen by the test): creates, objects written before the fence, removed or
// garbage annotations, objects outside the label selector, deletes, and
// concurrent writers with equal and mixed tokens.
func TestKubeObjectFenceEdgeCases(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns, err := env.cp.CreateNamespace(ctx, "fence-edges")
	if err != nil {
		t.Fatal(err)
	}
	admin := adminDynamic(t)
	cms := admin.Resource(configMapsGVR).Namespace(ns)
	// Written before the fence exists: labelled, no token.
	if _, err := cms.Create(ctx, fencedObject(configMapsGVR, "before", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f := installFence(t, ctx, ns, "leader", false)
	w := f.writer("pod-a", configMapsGVR)
	rejected := func(t *testing.T, err error, want string) {
		t.Helper()
		if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
			t.Fatalf("got %v, want a rejection with %q", err, want)
		}
	}

	t.Run("a create must carry a token", func(t *testing.T) {
		_, err := cms.Create(ctx, fencedObject(configMapsGVR, "new", nil), metav1.CreateOptions{})
		rejected(t, err, "missing fencing token")
		if _, err := w.Create(ctx, 3, fencedObject(configMapsGVR, "new", nil)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("an object written before the fence takes any token, then only higher or equal", func(t *testing.T) {
		_, err := cms.Update(ctx, withPlan(f.get(configMapsGVR, "before"), "x"), metav1.UpdateOptions{})
		rejected(t, err, "missing fencing token")
		if _, err := w.Update(ctx, 2, withPlan(f.get(configMapsGVR, "before"), "first fenced")); err != nil {
			t.Fatal(err)
		}
		_, err = w.Update(ctx, 1, withPlan(f.get(configMapsGVR, "before"), "lower"))
		var stale *fencing.StaleTokenError
		if !errors.As(err, &stale) || stale.Token != 1 || stale.Highest != 2 {
			t.Fatalf("token 1 after 2: %v", err)
		}
	})
	t.Run("an annotation removed or set to garbage is rejected and commits nothing", func(t *testing.T) {
		cur := f.get(configMapsGVR, "new")
		removed := cur.DeepCopy()
		removed.SetAnnotations(nil)
		_, err := cms.Update(ctx, removed, metav1.UpdateOptions{})
		rejected(t, err, "missing fencing token")
		_, err = cms.Patch(ctx, "new", types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+kubeobject.TokenAnnotation+`":null}}}`), metav1.PatchOptions{})
		rejected(t, err, "missing fencing token")
		for _, garbage := range []string{"abc", "-1", "1e3", " 3", "99999999999999999999", ""} {
			bad := cur.DeepCopy()
			bad.SetAnnotations(map[string]string{kubeobject.TokenAnnotation: garbage})
			_, err := cms.Update(ctx, bad, metav1.UpdateOptions{})
			want := "invalid fencing token"
			if garbage == "" {
				want = "missing fencing token"
			}
			rejected(t, err, want)
		}
		if after := f.get(configMapsGVR, "new"); after.GetResourceVersion() != cur.GetResourceVersion() {
			t.Fatalf("rejected writes changed the object: resourceVersion %s -> %s", cur.GetResourceVersion(), after.GetResourceVersion())
		}
	})
	t.Run("objects outside the label selector are not fenced", func(t *testing.T) {
		plain := fencedObject(configMapsGVR, "plain", map[string]string{})
		if _, err := cms.Create(ctx, plain, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cms.Update(ctx, withPlan(f.get(configMapsGVR, "plain"), "unfenced"), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("removing the label does not escape the fence", func(t *testing.T) {
		escape := f.get(configMapsGVR, "new")
		escape.SetLabels(nil)
		_, err := w.Update(ctx, 1, escape)
		if !errors.Is(err, fencing.ErrStaleToken) {
			t.Fatalf("a lower token with the label removed: %v", err)
		}
	})
	t.Run("a delete carries no token and is not fenced", func(t *testing.T) {
		if _, err := w.Create(ctx, 9, fencedObject(configMapsGVR, "doomed", nil)); err != nil {
			t.Fatal(err)
		}
		if err := cms.Delete(ctx, "doomed", metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete: %v", err)
		}
	})
	t.Run("concurrent writers with equal tokens are all admitted", func(t *testing.T) {
		results := concurrentWriters(ctx, t, f, "new", []int64{5, 5, 5, 5}, 25)
		for _, r := range results {
			if r.err != nil {
				t.Fatalf("writer with token %d: %v", r.token, r.err)
			}
		}
	})
	t.Run("concurrent writers with mixed tokens: admitted tokens never go down", func(t *testing.T) {
		results := concurrentWriters(ctx, t, f, "new", []int64{6, 8, 7, 6, 8}, 25)
		var admitted []result
		rejectedN := 0
		for _, r := range results {
			var stale *fencing.StaleTokenError
			switch {
			case r.err == nil:
				admitted = append(admitted, r)
			case errors.As(r.err, &stale) && stale.Token == r.token && stale.Highest > r.token:
				rejectedN++
			default:
				t.Fatalf("writer with token %d: %v", r.token, r.err)
			}
		}
		sort.Slice(admitted, func(a, b int) bool { return admitted[a].rv < admitted[b].rv })
		for i := 1; i < len(admitted); i++ {
			if admitted[i].token < admitted[i-1].token {
				t.Fatalf("token %d admitted (resourceVersion %d) after token %d (resourceVersion %d)", admitted[i].token, admitted[i].rv, admitted[i-1].token, admitted[i-1].rv)
			}
		}
		if last := f.get(configMapsGVR, "new").GetAnnotations()[kubeobject.TokenAnnotation]; last != "8" || rejectedN == 0 {
			t.Fatalf("the object ends with token %s (want 8) after %d admitted and %d rejected", last, len(admitted), rejectedN)
		}
		t.Logf("mixed tokens: %d admitted in non-decreasing token order, %d rejected as stale", len(admitted), rejectedN)
	})
}

type result struct {
	token int64
	rv    int64
	err   error
}

// concurrentWriters runs one goroutine per token, each doing writes
// read-modify-write updates of name (retrying conflicts), and returns every
// write's outcome with the resourceVersion it produced.
func concurrentWriters(ctx context.Context, t *testing.T, f *fenceEnv, name string, tokens []int64, writes int) []result {
	var mu sync.Mutex
	var out []result
	var wg sync.WaitGroup
	for i, tok := range tokens {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := f.writer(fmt.Sprintf("pod-%d", i), configMapsGVR)
			r := f.as("pod-x").Resource(configMapsGVR).Namespace(f.ns)
			for n := 0; n < writes; n++ {
				res := result{token: tok}
				for {
					cur, err := r.Get(ctx, name, metav1.GetOptions{})
					if err != nil {
						res.err = err
						break
					}
					got, err := w.Update(ctx, tok, withPlan(cur, fmt.Sprintf("writer %d write %d", i, n)))
					if apierrors.IsConflict(err) {
						continue
					}
					res.err = err
					if err == nil {
						res.rv, _ = strconv.ParseInt(got.GetResourceVersion(), 10, 64)
					}
					break
				}
				mu.Lock()
				out = append(out, res)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// README "Fencing Kubernetes objects": the Go snippet is the body between
// the markers below, run against the fence on the real API server: with
// token 7 it writes, with token 6 after 7 its stale branch runs.
func TestReadmeKubeObjectSnippetRunsAgainstTheFence(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme := readmeDoc(t, root, "README.md")
	var blocks []framework.CodeBlock
	for _, b := range readme.blocks {
		if b.Under("Fencing Kubernetes objects") && b.Lang == "go" {
			blocks = append(blocks, b)
		}
	}
	if len(blocks) != 1 {
		t.Fatalf("README \"Fencing Kubernetes objects\": %d go blocks, want 1", len(blocks))
	}
	src, err := os.ReadFile("kubeobject_fence_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, snippet, _ := strings.Cut(string(src), "// README begin\n")
	snippet, _, _ = strings.Cut(snippet, "// README end")
	norm := func(s string) string {
		var lines []string
		for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
			lines = append(lines, strings.Join(strings.Fields(l), " "))
		}
		return strings.Join(lines, "\n")
	}
	if got, want := norm(blocks[0].Code), norm(snippet); got != want {
		t.Fatalf("README %s differs from readmeKubeObjectGo:\nREADME:\n%s\ntest:\n%s", blocks[0].Where(), got, want)
	}
	ns, err := env.cp.CreateNamespace(ctx, "fence-readme")
	if err != nil {
		t.Fatal(err)
	}
	f := installFence(t, ctx, ns, "leader", false)
	stale, err := readmeKubeObjectGo(ctx, f.as("pod-a"), ns)
	if err != nil {
		t.Fatal(err)
	}
	if !stale {
		t.Fatal("the snippet's stale branch did not run for token 6 after 7")
	}
	if got := f.get(configMapsGVR, "billing").GetAnnotations()[kubeobject.TokenAnnotation]; got != "7" {
		t.Fatalf("the ConfigMap carries token %q after the stale write, want 7", got)
	}
}

func readmeKubeObjectGo(ctx context.Context, dyn dynamic.Interface, ns string) (staleSeen bool, err error) {
	configMaps := configMapsGVR
	type tokenAnswer struct{ Token int64 }
	for _, t := range []tokenAnswer{{Token: 7}, {Token: 6}} {
		cm := fencedObject(configMapsGVR, "billing", map[string]string{})
		err := func() error {
			// README begin
			objs := kubeobject.New(dyn.Resource(configMaps).Namespace(ns), "billing") // the field manager of every write
			cm.SetLabels(map[string]string{"elector-sidecar.io/fenced": "true"})      // the fence's objectSelector
			_, err := objs.Apply(ctx, t.Token, cm)                                    // t: the /token answer; or Create, Update, Patch, UpdateStatus, ...
			if errors.Is(err, fencing.ErrStaleToken) {                                // *fencing.StaleTokenError: Highest is the object's (or the Lease's) token; nothing written
				return err // a newer leader has written this object: this process is stale and must stop
			}
			// README end
			return err
		}()
		var ste *fencing.StaleTokenError
		switch {
		case t.Token == 7 && err != nil:
			return false, fmt.Errorf("token 7: %w", err)
		case t.Token == 6 && errors.Is(err, fencing.ErrStaleToken) && errors.As(err, &ste) && ste.Highest == 7:
			staleSeen = true
		case t.Token == 6:
			return false, fmt.Errorf("token 6 after 7: %v, want a stale token naming 7", err)
		}
	}
	return staleSeen, nil
}
