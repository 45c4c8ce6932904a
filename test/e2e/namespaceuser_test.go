//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// namespaceAdmin is the user of TestNamespaceAdminInstallsTheChartAndGetsALeader: bound to the built-in admin
// ClusterRole in the release namespace only. The e2e kubeconfig's user (system:masters) impersonates it.
const namespaceAdmin = "jane@example.com"

// TestNamespaceAdminInstallsTheChartAndGetsALeader: the install of test/chart's TestGuards, in real pods. A user
// with namespace rights only (a RoleBinding of the built-in admin ClusterRole, aggregated by the cluster's
// kube-controller-manager) installs the chart with its defaults (leaseGuard off) with the real helm and
// --kube-as-user: the install succeeds, the 3 pods become Ready (httpGet probes), exactly one leads (every
// sidecar's /leader agrees) and the Lease names it. The same user installing with leaseGuard.enabled=true is
// refused with a forbidden error naming the cluster-scoped ValidatingAdmissionPolicy, and after its uninstall
// nothing of that release is left.
func TestNamespaceAdminInstallsTheChartAndGetsALeader(t *testing.T) {
	t.Parallel()
	r := newRelease(t, "nsadmin")
	// newRelease turns the lease guard on for the other tests; this one installs with the chart's default (off).
	b, err := os.ReadFile(r.values)
	if err != nil {
		t.Fatal(err)
	}
	const guardOn = "leaseGuard:\n  enabled: true\n"
	if !strings.Contains(string(b), guardOn) {
		t.Fatalf("newRelease's values changed: no %q in\n%s", guardOn, b)
	}
	if err := os.WriteFile(r.values, []byte(strings.Replace(string(b), guardOn, "", 1)), 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	jane := bindNamespaceAdmin(ctx, t, r.ns, namespaceAdmin)
	if _, err := jane.AdmissionregistrationV1().ValidatingAdmissionPolicies().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("%s lists ValidatingAdmissionPolicies: %v, want Forbidden (namespace rights only)", namespaceAdmin, err)
	}

	// The defaults, as the namespace admin: everything the chart creates is namespaced.
	start := time.Now()
	out := r.helmOK(2*time.Minute, "install", releaseName, suite.chart, "--namespace", r.ns, "--values", r.values, "--kube-as-user", namespaceAdmin)
	timing(t, "helm install as namespace admin (command)", time.Since(start))
	if !strings.Contains(out, "WARNING: the Lease "+fullname+" is not guarded (leaseGuard.enabled=false, the default)") {
		t.Errorf("helm install's NOTES do not warn that the Lease is not guarded:\n%s", out)
	}
	r.waitPodsReady(replicas, 4*time.Minute) // Running and Ready: the sidecars' httpGet probes passed
	timing(t, "helm install as namespace admin -> 3 pods Ready", time.Since(start))
	leader, token := r.mustLeader(t)
	timing(t, "helm install as namespace admin -> one leader", time.Since(start))
	l, err := r.getLease(ctx)
	if err != nil || l == nil {
		t.Fatalf("get lease %s: %v (lease %v)", r.lease, err, l)
	}
	if holder := framework.HolderOf(l); holder != leader {
		t.Errorf("Lease %s holder %q, want the leader %q", r.lease, holder, leader)
	}
	if got := framework.TransitionsOf(l); got != token {
		t.Errorf("Lease %s spec.leaseTransitions = %d, want the leader's token %d", r.lease, got, token)
	}
	if a := r.api(ctx, leader, "/token"); a.err != nil || a.status != 200 || a.token.Token != token {
		t.Errorf("leader %s /token: %v; want 200 with token %d", leader, a, token)
	}
	if _, err := suite.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, guardName(r.ns), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ValidatingAdmissionPolicy %s after the default install: %v, want none", guardName(r.ns), err)
	}

	// The lease guard is cluster-scoped: the same user cannot install it, and the error names the policy.
	const refused = "guarded"
	policy := fmt.Sprintf("%s-elector-sidecar.%s.lease-guard.elector-sidecar", refused, r.ns)
	t.Cleanup(func() { // never leave a cluster-scoped policy behind, whatever happened
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		_ = suite.cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(cctx, policy, metav1.DeleteOptions{})
		_ = suite.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(cctx, policy, metav1.DeleteOptions{})
	})
	out, err = r.helm(2*time.Minute, "install", refused, suite.chart, "--namespace", r.ns, "--values", r.values,
		"--set", "leaseGuard.enabled=true", "--kube-as-user", namespaceAdmin)
	if err == nil || !strings.Contains(out, "forbidden") || !strings.Contains(out, "ValidatingAdmissionPolicy") ||
		!strings.Contains(out, policy) || !strings.Contains(out, "at the cluster scope") {
		t.Errorf("helm install --set leaseGuard.enabled=true as %s: %v\n%s\nwant forbidden on the cluster-scoped ValidatingAdmissionPolicy %s", namespaceAdmin, err, out, policy)
	} else {
		t.Logf("helm install --set leaseGuard.enabled=true as %s fails as it should:\n  %s", namespaceAdmin, strings.TrimSpace(out))
	}

	// Nothing of the refused release is left once it is uninstalled (helm may keep a failed release record).
	out, err = r.helm(2*time.Minute, "uninstall", refused, "--namespace", r.ns, "--kube-as-user", namespaceAdmin)
	if err != nil && !strings.Contains(out, "not found") {
		t.Errorf("helm uninstall %s as %s: %v\n%s", refused, namespaceAdmin, err, out)
	}
	t.Logf("helm uninstall %s as %s: %s", refused, namespaceAdmin, strings.TrimSpace(out))
	if _, err := suite.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, policy, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ValidatingAdmissionPolicy %s after the refused install: %v, want none", policy, err)
	}
	if _, err := suite.cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, policy, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ValidatingAdmissionPolicyBinding %s after the refused install: %v, want none", policy, err)
	}
	// Every state: helm 4 has no --all.
	if list := r.helmOK(time.Minute, "list", "--short", "--namespace", r.ns,
		"--deployed", "--failed", "--pending", "--superseded", "--uninstalling", "--uninstalled"); strings.TrimSpace(list) != releaseName {
		t.Errorf("helm list (every state) after uninstalling the refused release:\n%s\nwant only %s", list, releaseName)
	}
	err = framework.Eventually(ctx, time.Second, 2*time.Minute, "nothing of release "+refused+" left in "+r.ns, func(ctx context.Context) error {
		sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + refused}
		var left []string
		if l, err := suite.cs.AppsV1().Deployments(r.ns).List(ctx, sel); err != nil {
			return err
		} else if len(l.Items) > 0 {
			left = append(left, fmt.Sprintf("%d Deployments", len(l.Items)))
		}
		if l, err := suite.cs.CoreV1().Pods(r.ns).List(ctx, sel); err != nil {
			return err
		} else if len(l.Items) > 0 {
			left = append(left, fmt.Sprintf("%d pods", len(l.Items)))
		}
		name := refused + "-elector-sidecar"
		_, saErr := suite.cs.CoreV1().ServiceAccounts(r.ns).Get(ctx, name, metav1.GetOptions{})
		_, roleErr := suite.cs.RbacV1().Roles(r.ns).Get(ctx, name, metav1.GetOptions{})
		_, bindingErr := suite.cs.RbacV1().RoleBindings(r.ns).Get(ctx, name, metav1.GetOptions{})
		for kind, err := range map[string]error{"ServiceAccount": saErr, "Role": roleErr, "RoleBinding": bindingErr} {
			if err == nil {
				left = append(left, kind+"/"+name)
			} else if !apierrors.IsNotFound(err) {
				return err
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("still there: %s", strings.Join(left, ", "))
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}

	// The installed release is untouched by the refused one: its pods are Ready and the leader still leads.
	r.waitPodsReady(replicas, time.Minute)
	if a := r.api(ctx, leader, "/token"); a.err != nil || a.status != 200 || a.token.Token != token {
		t.Errorf("leader %s /token after the refused install: %v; want still leading with token %d", leader, a, token)
	}
}

// bindNamespaceAdmin binds user to the built-in admin ClusterRole in ns only (a RoleBinding) and returns a
// client acting as user, once RBAC lets it read ServiceAccounts there (kube-controller-manager aggregates the
// admin role's rules, and the authorizer's caches follow asynchronously).
func bindNamespaceAdmin(ctx context.Context, t *testing.T, ns, user string) kubernetes.Interface {
	t.Helper()
	_, err := suite.cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "namespace-admin", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("binding %s to the admin ClusterRole in %s: %v", user, ns, err)
	}
	cfg := rest.CopyConfig(suite.restConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	as, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = framework.Eventually(ctx, 250*time.Millisecond, 30*time.Second, user+" to be admin of "+ns, func(ctx context.Context) error {
		_, err := as.CoreV1().ServiceAccounts(ns).List(ctx, metav1.ListOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return as
}
