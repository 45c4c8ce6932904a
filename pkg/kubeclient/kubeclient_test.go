package kubeclient_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/watchlist"

	"github.com/elector-sidecar/elector-sidecar/pkg/kubeclient"
	"github.com/elector-sidecar/elector-sidecar/pkg/kubeclient/clientset"
)

// request is what the fake API server saw.
type request struct {
	method, path, query, contentType, body string
}

// apiServer records the requests; newClient's handler answers each with a
// canned object of the kind asked for.
type apiServer struct {
	mu   sync.Mutex
	reqs []request
}

func (s *apiServer) last(t *testing.T) request {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.reqs) == 0 {
		t.Fatal("no request reached the server")
	}
	return s.reqs[len(s.reqs)-1]
}

func newClient(t *testing.T) (*kubeclient.Client, *apiServer) {
	t.Helper()
	s := &apiServer{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.reqs = append(s.reqs, request{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Content-Type"), string(b)})
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		q := r.URL.Query()
		switch {
		case q.Get("watch") == "true":
			ev := map[string]any{"type": "ADDED", "object": map[string]any{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
				"metadata": map[string]any{"name": "l", "namespace": "ns", "resourceVersion": "7"}}}
			_ = json.NewEncoder(w).Encode(ev)
		case strings.HasSuffix(r.URL.Path, "/leases"):
			_, _ = io.WriteString(w, `{"apiVersion":"coordination.k8s.io/v1","kind":"LeaseList","metadata":{"resourceVersion":"5"},"items":[{"metadata":{"name":"l","namespace":"ns"}}]}`)
		case strings.Contains(r.URL.Path, "/leases/"):
			_, _ = io.WriteString(w, `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"l","namespace":"ns","resourceVersion":"6"},"spec":{"leaseTransitions":3}}`)
		case strings.HasSuffix(r.URL.Path, "/pods"):
			_, _ = io.WriteString(w, `{"apiVersion":"v1","kind":"PodList","items":[{"metadata":{"name":"p","namespace":"ns"}}]}`)
		case strings.Contains(r.URL.Path, "/pods/missing"):
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"apiVersion":"v1","kind":"Status","status":"Failure","reason":"NotFound","code":404,"message":"pods \"missing\" not found"}`)
		case strings.Contains(r.URL.Path, "/pods/"):
			_, _ = io.WriteString(w, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns","labels":{"k":"v"}}}`)
		default: // events
			_, _ = io.WriteString(w, `{"apiVersion":"v1","kind":"Event","metadata":{"name":"e","namespace":"ns"},"count":2}`)
		}
	}))
	t.Cleanup(srv.Close)
	c, err := kubeclient.NewForConfig(&rest.Config{Host: srv.URL, QPS: 100, Burst: 10})
	if err != nil {
		t.Fatal(err)
	}
	return c, s
}

func TestLeaseClientSendsTheRequestsOfClientGosTypedClient(t *testing.T) {
	c, s := newClient(t)
	ctx := context.Background()
	leases := c.Leases("ns")
	check := func(what string, want request) {
		t.Helper()
		got := s.last(t)
		if got.method != want.method || got.path != want.path || got.query != want.query {
			t.Errorf("%s: sent %s %s?%s, want %s %s?%s", what, got.method, got.path, got.query, want.method, want.path, want.query)
		}
	}

	l, err := leases.Get(ctx, "l", metav1.GetOptions{ResourceVersion: "0"})
	if err != nil || l.Spec.LeaseTransitions == nil || *l.Spec.LeaseTransitions != 3 || l.ResourceVersion != "6" {
		t.Fatalf("Get: %+v, %v", l, err)
	}
	check("Get", request{method: "GET", path: "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", query: "resourceVersion=0"})

	in := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "ns", ResourceVersion: "5"}}
	if _, err := leases.Create(ctx, in, metav1.CreateOptions{}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	check("Create", request{method: "POST", path: "/apis/coordination.k8s.io/v1/namespaces/ns/leases"})
	if got := s.last(t); got.contentType != "application/json" || !strings.Contains(got.body, `"resourceVersion":"5"`) || !strings.Contains(got.body, `"kind":"Lease"`) {
		t.Errorf("Create body %s (%s)", got.body, got.contentType)
	}
	if _, err := leases.Update(ctx, in, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("Update: %v", err)
	}
	check("Update", request{method: "PUT", path: "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l"})

	list, err := leases.List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=l", ResourceVersion: "0"})
	if err != nil || len(list.Items) != 1 || list.ResourceVersion != "5" {
		t.Fatalf("List: %+v, %v", list, err)
	}
	check("List", request{method: "GET", path: "/apis/coordination.k8s.io/v1/namespaces/ns/leases", query: "fieldSelector=metadata.name%3Dl&resourceVersion=0"})

	timeout := int64(30)
	w, err := leases.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=l", ResourceVersion: "5", AllowWatchBookmarks: true, TimeoutSeconds: &timeout})
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	defer w.Stop()
	check("Watch", request{method: "GET", path: "/apis/coordination.k8s.io/v1/namespaces/ns/leases",
		query: "allowWatchBookmarks=true&fieldSelector=metadata.name%3Dl&resourceVersion=5&timeout=30s&timeoutSeconds=30&watch=true"})
	select {
	case ev := <-w.ResultChan():
		if l, ok := ev.Object.(*coordinationv1.Lease); ev.Type != watch.Added || !ok || l.ResourceVersion != "7" {
			t.Errorf("watch event %v %T %+v", ev.Type, ev.Object, ev.Object)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event")
	}
}

func TestPodClientGetsListsAndPatches(t *testing.T) {
	c, s := newClient(t)
	ctx := context.Background()
	pods := c.Pods("ns")
	p, err := pods.Get(ctx, "p", metav1.GetOptions{})
	if err != nil || p.Labels["k"] != "v" {
		t.Fatalf("Get: %+v, %v", p, err)
	}
	if got := s.last(t); got.method != "GET" || got.path != "/api/v1/namespaces/ns/pods/p" {
		t.Errorf("Get sent %+v", got)
	}
	if _, err := pods.Get(ctx, "missing", metav1.GetOptions{}); err == nil || !strings.Contains(err.Error(), `pods "missing" not found`) {
		t.Errorf("Get of a missing pod: %v, want the server's NotFound", err)
	}
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "a=true"})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("List: %+v, %v", list, err)
	}
	if got := s.last(t); got.path != "/api/v1/namespaces/ns/pods" || got.query != "labelSelector=a%3Dtrue" {
		t.Errorf("List sent %+v", got)
	}
	body := `{"metadata":{"labels":{"a":null}}}`
	if _, err := pods.Patch(ctx, "p", types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
		t.Fatalf("Patch: %v", err)
	}
	if got := s.last(t); got.method != "PATCH" || got.path != "/api/v1/namespaces/ns/pods/p" || got.contentType != string(types.MergePatchType) || got.body != body {
		t.Errorf("Patch sent %+v", got)
	}
}

func TestEventClientCreatesInItsNamespace(t *testing.T) {
	c, s := newClient(t)
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: "ns"}, Reason: "LeaderElection"}
	out, err := c.Events("ns").Create(context.Background(), ev, metav1.CreateOptions{})
	if err != nil || out.Count != 2 {
		t.Fatalf("Create: %+v, %v", out, err)
	}
	if got := s.last(t); got.method != "POST" || got.path != "/api/v1/namespaces/ns/events" || !strings.Contains(got.body, `"reason":"LeaderElection"`) {
		t.Errorf("Create sent %+v", got)
	}
}

func TestSchemeKnowsTheKindsTheRecorderReferences(t *testing.T) {
	for obj, want := range map[runtime.Object]string{
		&coordinationv1.Lease{}: "coordination.k8s.io/v1, Kind=Lease",
		&corev1.Pod{}:           "/v1, Kind=Pod",
		&corev1.Event{}:         "/v1, Kind=Event",
	} {
		gvks, _, err := kubeclient.Scheme.ObjectKinds(obj)
		if err != nil || len(gvks) != 1 || gvks[0].String() != want {
			t.Errorf("%T: %v, %v; want %s", obj, gvks, err, want)
		}
	}
}

func TestClientsetAdapterKeepsTheFakesWatchListAnswer(t *testing.T) {
	if !watchlist.DoesClientNotSupportWatchListSemantics(clientset.Wrap(fake.NewClientset())) {
		t.Error("the wrapped fake clientset claims watch-list support; informers would wait for a streaming list it never sends")
	}
	c, _ := newClient(t)
	if watchlist.DoesClientNotSupportWatchListSemantics(c) {
		t.Error("the real client claims no watch-list support")
	}
}

// The sidecar asks for protobuf (cheaper to decode for every follower on
// every Lease event): the client's scheme and codecs send and read it, the
// watch stream included.
func TestLeaseClientSpeaksProtobufWhenTheConfigAsks(t *testing.T) {
	codecs := serializer.NewCodecFactory(kubeclient.Scheme)
	info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	if !ok || info.StreamSerializer == nil {
		t.Fatal("the client's scheme has no protobuf serializer")
	}
	enc := codecs.EncoderForVersion(info.Serializer, coordinationv1.SchemeGroupVersion)
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "ns", ResourceVersion: "6"},
		Spec: coordinationv1.LeaseSpec{LeaseTransitions: ptr(int32(3))}}
	raw, err := runtime.Encode(enc, lease)
	if err != nil {
		t.Fatal(err)
	}
	var sentType string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			sentType = r.Header.Get("Content-Type")
		}
		if !strings.HasPrefix(r.Header.Get("Accept"), runtime.ContentTypeProtobuf) {
			w.WriteHeader(http.StatusNotAcceptable)
			return
		}
		if r.URL.Query().Get("watch") == "true" {
			w.Header().Set("Content-Type", runtime.ContentTypeProtobuf+";stream=watch")
			ev := &metav1.WatchEvent{Type: string(watch.Modified), Object: runtime.RawExtension{Raw: raw}}
			if err := streaming.NewEncoder(info.StreamSerializer.Framer.NewFrameWriter(w), info.StreamSerializer.Serializer).Encode(ev); err != nil {
				t.Error(err)
			}
			return
		}
		w.Header().Set("Content-Type", runtime.ContentTypeProtobuf)
		_, _ = w.Write(raw)
	}))
	t.Cleanup(srv.Close)
	c, err := kubeclient.NewForConfig(&rest.Config{Host: srv.URL, QPS: 100, Burst: 10, ContentConfig: rest.ContentConfig{
		ContentType: runtime.ContentTypeProtobuf, AcceptContentTypes: runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	leases := c.Leases("ns")
	if l, err := leases.Get(ctx, "l", metav1.GetOptions{}); err != nil || l.ResourceVersion != "6" || *l.Spec.LeaseTransitions != 3 {
		t.Fatalf("Get: %+v, %v", l, err)
	}
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil || sentType != runtime.ContentTypeProtobuf {
		t.Fatalf("Update: %v, sent as %q", err, sentType)
	}
	w, err := leases.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	defer w.Stop()
	select {
	case ev := <-w.ResultChan():
		if l, ok := ev.Object.(*coordinationv1.Lease); ev.Type != watch.Modified || !ok || l.ResourceVersion != "6" || *l.Spec.LeaseTransitions != 3 {
			t.Errorf("watch event %v %T %+v", ev.Type, ev.Object, ev.Object)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event")
	}
}

func ptr[T any](v T) *T { return &v }
