//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// TestUnhealthyAppMovesLeadership: with appHealth.enabled the sidecar probes
// the demo app's /healthz; switching the leader's demo app to failing (as an
// operator would, with kubectl exec) makes that sidecar step down (an Event
// "stepped down: app unhealthy" on the Lease) and another pod take the Lease
// with a higher token; the unhealthy pod does not lead while its app fails,
// and campaigns again ("campaigns again: app healthy") once it passes.
func TestUnhealthyAppMovesLeadership(t *testing.T) {
	t.Parallel()
	r := newRelease(t, "apphealth")
	f, err := os.OpenFile(r.values, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString("appHealth:\n  enabled: true\n  period: 1s\n  timeout: 500ms\n  failureThreshold: 2\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	r.install()
	leader, t1 := r.mustLeader(t)

	start := time.Now()
	r.kubectlOK("exec", leader, "-c", appName, "--", "/elector-demo", "health", "fail")
	newLeader, t2 := r.waitNewHolder(leader, t1, 60*time.Second)
	timing(t, "leader's app failing -> new Lease holder", time.Since(start))
	t.Logf("%s's app failing: %s holds the Lease with token %d (was %d)", leader, newLeader, t2, t1)
	r.waitLeaseEvent(leader + " stepped down: app unhealthy")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if a := r.api(ctx, leader, "/leader"); a.err != nil || a.leader.IsLeader {
		t.Errorf("%s's /leader while its app fails: %v", leader, a)
	}

	// The app recovers: its pod campaigns again (it takes the Lease only when it is free again).
	r.kubectlOK("exec", leader, "-c", appName, "--", "/elector-demo", "health", "pass")
	r.waitLeaseEvent(leader + " campaigns again: app healthy")
	if l, err := r.getLease(ctx); err != nil || framework.HolderOf(l) != newLeader {
		t.Errorf("Lease after the recovery: %v (err %v); want %s still holding it", l, err, newLeader)
	}
}

// waitLeaseEvent waits for an Event on the release's Lease whose message contains msg.
func (r *release) waitLeaseEvent(msg string) {
	r.t.Helper()
	var seen []string
	err := framework.Poll(context.Background(), 500*time.Millisecond, 30*time.Second, func(ctx context.Context) (bool, error) {
		evs, err := suite.cs.CoreV1().Events(r.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		seen = seen[:0]
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind != "Lease" || e.InvolvedObject.Name != r.lease {
				continue
			}
			seen = append(seen, e.Message)
			if strings.Contains(e.Message, msg) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		r.t.Fatalf("no Event on Lease %s with %q: %v; events: %s", r.lease, msg, err, fmt.Sprintf("%q", seen))
	}
}
