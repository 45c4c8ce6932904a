package leaderlabel

import (
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/elector-sidecar/elector-sidecar/pkg/kubeclient/clientset"
)

// TestOthersSelectorKeepsToTheElectionsPods: the pods a new leader strips
// the label from carry the label and match PodSelector (all of its
// requirements); without one, every labelled pod of the namespace.
func TestOthersSelectorKeepsToTheElectionsPods(t *testing.T) {
	for _, tt := range []struct{ pods, want string }{
		{"", "elector-sidecar.io/leader=true"},
		{"app.kubernetes.io/instance=billing", "app.kubernetes.io/instance=billing,elector-sidecar.io/leader=true"},
		{"app.kubernetes.io/name=elector-sidecar, app.kubernetes.io/instance=billing", "app.kubernetes.io/instance=billing,app.kubernetes.io/name=elector-sidecar,elector-sidecar.io/leader=true"},
		{"tier in (a,b),!canary", "!canary,elector-sidecar.io/leader=true,tier in (a,b)"},
	} {
		got, err := othersSelector(DefaultKey, tt.pods)
		if err != nil || got != tt.want {
			t.Errorf("othersSelector(%q) = %q, %v; want %q", tt.pods, got, err, tt.want)
		}
	}
}

func TestNewRefusesABadPodSelector(t *testing.T) {
	_, err := New(Config{Client: clientset.Wrap(fake.NewClientset()), Namespace: ns, PodName: "p", Key: DefaultKey, PodSelector: "a=b=c"})
	if err == nil || !strings.Contains(err.Error(), `leader label pod selector "a=b=c"`) {
		t.Fatalf("New with a bad pod selector: %v", err)
	}
}
