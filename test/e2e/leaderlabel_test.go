//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// leaderServiceName is the chart's leader Service for release "e2e".
const leaderServiceName = fullname + "-leader"

// sliceAddresses returns every address of the leader Service's EndpointSlices, sorted.
func (r *release) sliceAddresses(ctx context.Context) ([]string, error) {
	list, err := suite.cs.DiscoveryV1().EndpointSlices(r.ns).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + leaderServiceName,
	})
	if err != nil {
		return nil, err
	}
	var addrs []string
	for _, s := range list.Items {
		for _, ep := range s.Endpoints {
			addrs = append(addrs, ep.Addresses...)
		}
	}
	slices.Sort(addrs)
	return addrs, nil
}

// podIP returns a pod's IP.
func (r *release) podIP(ctx context.Context, pod string) string {
	r.t.Helper()
	p, err := suite.cs.CoreV1().Pods(r.ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil || p.Status.PodIP == "" {
		r.t.Fatalf("pod %s IP: %v (%v)", pod, err, p)
	}
	return p.Status.PodIP
}

// waitSliceIs polls (every 50ms) until the leader Service's EndpointSlices list exactly ip; it returns when.
func (r *release) waitSliceIs(ip string, timeout time.Duration) time.Time {
	r.t.Helper()
	var last []string
	err := framework.Poll(context.Background(), 50*time.Millisecond, timeout, func(ctx context.Context) (bool, error) {
		addrs, err := r.sliceAddresses(ctx)
		if err != nil {
			return false, nil
		}
		last = addrs
		return slices.Equal(addrs, []string{ip}), nil
	})
	if err != nil {
		r.t.Fatalf("EndpointSlices of Service %s: %v, want exactly [%s]: %v", leaderServiceName, last, ip, err)
	}
	return time.Now()
}

// waitLeaseTaken waits on a Lease watch for a holder other than old and "" (a direct handoff once its
// successor accepted it) and returns it and when it was seen.
func (r *release) waitLeaseTaken(events <-chan leaseEvent, old string, timeout time.Duration) (string, time.Time) {
	r.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				r.t.Fatal("lease watch ended")
			}
			if ev.holder != "" && ev.holder != old && !ev.handoff { // a handoff counts once accepted
				return ev.holder, ev.at
			}
		case <-deadline:
			r.t.Fatalf("no holder other than %s within %v", old, timeout)
		}
	}
}

// TestLeaderServiceRoutesToTheLeaderOnly: with leaderLabel.enabled and leaderService.enabled, the leader
// Service's EndpointSlices list exactly the leader pod's IP after install, after a SIGTERM handoff (the
// leader pod deleted) and after a frozen leader (SIGSTOP of its sidecar) was replaced; the time from the
// Lease change to the EndpointSlice change is measured each time.
func TestLeaderServiceRoutesToTheLeaderOnly(t *testing.T) {
	t.Parallel()
	r := newRelease(t, "leaderlabel")
	f, err := os.OpenFile(r.values, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString("leaderLabel:\n  enabled: true\nleaderService:\n  enabled: true\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	r.install()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The sidecars label pods under the leader label guard (on by default with the label).
	if _, err := suite.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, leaderLabelGuardName(r.ns), metav1.GetOptions{}); err != nil {
		t.Fatalf("leader label guard %s: %v", leaderLabelGuardName(r.ns), err)
	}
	leader, _ := r.mustLeader(t)
	start := time.Now()
	r.waitSliceIs(r.podIP(ctx, leader), time.Minute)
	timing(t, "leader agreed -> EndpointSlice lists it alone", time.Since(start))

	// SIGTERM handoff: delete the leader pod.
	l, err := r.getLease(ctx)
	if err != nil || l == nil {
		t.Fatalf("get lease: %v", err)
	}
	events, err := r.watchLease(ctx, l.ResourceVersion)
	if err != nil {
		t.Fatal(err)
	}
	r.kubectlOK("delete", "pod", leader, "--wait=false")
	next, changed := r.waitLeaseTaken(events, leader, time.Minute)
	routed := r.waitSliceIs(r.podIP(ctx, next), time.Minute)
	timing(t, "SIGTERM handoff: Lease change -> EndpointSlice", routed.Sub(changed))
	t.Logf("pod %s deleted: %s holds the Lease; the Service's EndpointSlice lists it alone %v later", leader, next, routed.Sub(changed).Round(time.Millisecond))

	// A frozen leader: its sidecar cannot remove its label; the leader that takes over does.
	pod, err := suite.cs.CoreV1().Pods(r.ns).Get(ctx, next, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pid, err := hostPID(hostContainerID(pod, sidecarName), "/elector-sidecar")
	if err != nil {
		skipUnlessRoot(t, fmt.Sprintf("cannot find the leader's sidecar host process: %v", err))
	}
	frozen := true
	t.Cleanup(func() {
		if frozen {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	})
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		skipUnlessRoot(t, fmt.Sprintf("cannot SIGSTOP pid %d: %v", pid, err))
	}
	third, changed := r.waitLeaseTaken(events, next, time.Minute)
	routed = r.waitSliceIs(r.podIP(ctx, third), time.Minute)
	timing(t, "frozen leader: Lease change -> EndpointSlice", routed.Sub(changed))
	t.Logf("%s frozen: %s holds the Lease; the Service's EndpointSlice lists it alone %v later", next, third, routed.Sub(changed).Round(time.Millisecond))
	if p, err := suite.cs.CoreV1().Pods(r.ns).Get(ctx, next, metav1.GetOptions{}); err != nil || p.Labels["elector-sidecar.io/leader"] != "" {
		t.Errorf("frozen former leader %s: labels %v (err %v), want no leader label", next, p.Labels, err)
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT pid %d: %v", pid, err)
	}
	frozen = false
	// Resumed, the former leader does not label itself again: the Service keeps routing to the leader.
	err = framework.Poll(ctx, 200*time.Millisecond, 30*time.Second, func(ctx context.Context) (bool, error) {
		a := r.api(ctx, next, "/leader")
		return a.err == nil && !a.leader.IsLeader && a.leader.Holder == third, nil
	})
	if err != nil {
		t.Fatalf("resumed %s does not follow %s: %v", next, third, err)
	}
	r.waitSliceIs(r.podIP(ctx, third), 30*time.Second)
}
