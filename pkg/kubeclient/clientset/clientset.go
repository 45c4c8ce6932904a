// Package clientset adapts a k8s.io/client-go/kubernetes.Interface (a real
// clientset, or the fake one of k8s.io/client-go/kubernetes/fake) to
// kubeclient.Interface, for tests and tools that link the clientset anyway.
// The sidecar binary must not import it (see kubeclient).
package clientset

import (
	"k8s.io/client-go/kubernetes"

	"github.com/elector-sidecar/elector-sidecar/pkg/kubeclient"
)

// Wrap returns cs as a kubeclient.Interface. When cs tells the informers
// that it does not support watch-list semantics (the fake clientset does),
// so does the result.
func Wrap(cs kubernetes.Interface) kubeclient.Interface {
	return adapter{cs}
}

type adapter struct{ cs kubernetes.Interface }

func (a adapter) Leases(namespace string) kubeclient.LeaseInterface {
	return a.cs.CoordinationV1().Leases(namespace)
}

func (a adapter) Pods(namespace string) kubeclient.PodInterface {
	return a.cs.CoreV1().Pods(namespace)
}

// IsWatchListSemanticsUnSupported forwards the clientset's answer (see
// k8s.io/client-go/util/watchlist.DoesClientNotSupportWatchListSemantics).
func (a adapter) IsWatchListSemanticsUnSupported() bool {
	u, ok := a.cs.(interface{ IsWatchListSemanticsUnSupported() bool })
	return ok && u.IsWatchListSemanticsUnSupported()
}
