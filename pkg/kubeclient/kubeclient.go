// Package kubeclient is the sidecar's Kubernetes client: only the Leases
// (coordination.k8s.io/v1), Pods and Events (core/v1) it uses, over one
// shared http.Client and one client-side rate limiter, as
// k8s.io/client-go/kubernetes builds them.
//
// It exists for the binary's size and memory: client-go's clientset and its
// typed clients import k8s.io/client-go/kubernetes/scheme, which links and
// registers the types of every API group (about 10 MiB of the binary, most
// of it resident). Here the scheme holds coordination/v1 and core/v1 only.
// Recorder writes the Events without client-go's tools/record, whose event
// correlator links strategic merge patch and the OpenAPI models.
// TestSidecarBinaryLinksNoClientset (cmd/elector-sidecar) keeps it so.
//
// Interface is what the election and the leader label take; the package
// clientset adapts a kubernetes.Interface (the fake clientset in tests, or
// a real one in tools that link it anyway) to it.
package kubeclient

import (
	"context"
	"fmt"
	"net/http"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// LeaseInterface is the part of a typed Lease client the election uses;
// client-go's coordination/v1 LeaseInterface has the same methods.
type LeaseInterface interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error)
	Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error)
	Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
	List(ctx context.Context, opts metav1.ListOptions) (*coordinationv1.LeaseList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*coordinationv1.Lease, error)
}

// PodInterface is the part of a typed Pod client the leader label uses;
// client-go's core/v1 PodInterface has the same methods.
type PodInterface interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Pod, error)
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Pod, error)
}

// Interface gives the namespaced clients. *Client implements it, and so
// does clientset.Wrap of a kubernetes.Interface.
type Interface interface {
	Leases(namespace string) LeaseInterface
	Pods(namespace string) PodInterface
}

// Scheme holds the types this client sends and receives: coordination/v1,
// core/v1 and the meta/v1 options and Status. The Recorder finds the kind
// of an event's object here.
var Scheme = runtime.NewScheme()

var (
	codecs         = serializer.NewCodecFactory(Scheme)
	parameterCodec = runtime.NewParameterCodec(Scheme)
)

func init() {
	// As k8s.io/client-go/kubernetes/scheme does, for these two groups.
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	utilruntime.Must(coordinationv1.AddToScheme(Scheme))
	utilruntime.Must(corev1.AddToScheme(Scheme))
}

// Client is the sidecar's client. Create it with NewForConfig.
type Client struct {
	coordination rest.Interface
	core         rest.Interface
}

var _ Interface = (*Client)(nil)

// NewForConfig returns a client for c, as kubernetes.NewForConfig does:
// one http.Client (transport, connections) and, unless c has a
// RateLimiter, one token bucket of c.QPS and c.Burst shared by all
// requests.
func NewForConfig(c *rest.Config) (*Client, error) {
	cfg := *c
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	httpClient, err := rest.HTTPClientFor(&cfg)
	if err != nil {
		return nil, err
	}
	return NewForConfigAndClient(&cfg, httpClient)
}

// NewForConfigAndClient is NewForConfig with the given http.Client.
func NewForConfigAndClient(c *rest.Config, httpClient *http.Client) (*Client, error) {
	cfg := *c
	if cfg.RateLimiter == nil && cfg.QPS > 0 {
		if cfg.Burst <= 0 {
			return nil, fmt.Errorf("burst is required to be greater than 0 when RateLimiter is not set and QPS is set to greater than 0")
		}
		cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	}
	coordination, err := restClient(&cfg, httpClient, coordinationv1.SchemeGroupVersion, "/apis")
	if err != nil {
		return nil, err
	}
	core, err := restClient(&cfg, httpClient, corev1.SchemeGroupVersion, "/api")
	if err != nil {
		return nil, err
	}
	return &Client{coordination: coordination, core: core}, nil
}

// restClient is what a generated typed client's NewForConfigAndClient
// builds (setConfigDefaults), with this package's scheme.
func restClient(c *rest.Config, httpClient *http.Client, gv schema.GroupVersion, apiPath string) (*rest.RESTClient, error) {
	cfg := *c
	cfg.GroupVersion = &gv
	cfg.APIPath = apiPath
	cfg.NegotiatedSerializer = rest.CodecFactoryForGeneratedClient(Scheme, codecs).WithoutConversion()
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientForConfigAndClient(&cfg, httpClient)
}

// Leases returns the Lease client of namespace.
func (c *Client) Leases(namespace string) LeaseInterface {
	return &leases{client: c.coordination, ns: namespace}
}

// Pods returns the Pod client of namespace.
func (c *Client) Pods(namespace string) PodInterface {
	return &pods{client: c.core, ns: namespace}
}

// timeout is a list or watch request's client-side timeout, as the
// generated clients derive it.
func timeout(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}

type leases struct {
	client rest.Interface
	ns     string
}

func (c *leases) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error) {
	result := &coordinationv1.Lease{}
	err := c.client.Get().Namespace(c.ns).Resource("leases").Name(name).
		VersionedParams(&opts, parameterCodec).Do(ctx).Into(result)
	return result, err
}

func (c *leases) Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	result := &coordinationv1.Lease{}
	err := c.client.Post().Namespace(c.ns).Resource("leases").
		VersionedParams(&opts, parameterCodec).Body(lease).Do(ctx).Into(result)
	return result, err
}

func (c *leases) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	result := &coordinationv1.Lease{}
	err := c.client.Put().Namespace(c.ns).Resource("leases").Name(lease.Name).
		VersionedParams(&opts, parameterCodec).Body(lease).Do(ctx).Into(result)
	return result, err
}

func (c *leases) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return c.client.Delete().Namespace(c.ns).Resource("leases").Name(name).Body(&opts).Do(ctx).Error()
}

func (c *leases) List(ctx context.Context, opts metav1.ListOptions) (*coordinationv1.LeaseList, error) {
	result := &coordinationv1.LeaseList{}
	err := c.client.Get().Namespace(c.ns).Resource("leases").
		VersionedParams(&opts, parameterCodec).Timeout(timeout(opts)).Do(ctx).Into(result)
	return result, err
}

func (c *leases) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.client.Get().Namespace(c.ns).Resource("leases").
		VersionedParams(&opts, parameterCodec).Timeout(timeout(opts)).Watch(ctx)
}

func (c *leases) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*coordinationv1.Lease, error) {
	result := &coordinationv1.Lease{}
	err := c.client.Patch(pt).Namespace(c.ns).Resource("leases").Name(name).SubResource(subresources...).
		VersionedParams(&opts, parameterCodec).Body(data).Do(ctx).Into(result)
	return result, err
}

type pods struct {
	client rest.Interface
	ns     string
}

func (c *pods) Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Pod, error) {
	result := &corev1.Pod{}
	err := c.client.Get().Namespace(c.ns).Resource("pods").Name(name).
		VersionedParams(&opts, parameterCodec).Do(ctx).Into(result)
	return result, err
}

func (c *pods) List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	result := &corev1.PodList{}
	err := c.client.Get().Namespace(c.ns).Resource("pods").
		VersionedParams(&opts, parameterCodec).Timeout(timeout(opts)).Do(ctx).Into(result)
	return result, err
}

func (c *pods) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Pod, error) {
	result := &corev1.Pod{}
	err := c.client.Patch(pt).Namespace(c.ns).Resource("pods").Name(name).SubResource(subresources...).
		VersionedParams(&opts, parameterCodec).Body(data).Do(ctx).Into(result)
	return result, err
}
