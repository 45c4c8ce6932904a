package leaderlabel

import (
	"fmt"

	"k8s.io/apimachinery/pkg/labels"
)

// othersSelector selects the pods that carry the label key=true and match
// podSelector (a label selector; "" matches every pod).
func othersSelector(key, podSelector string) (string, error) {
	ps, err := labels.Parse(podSelector)
	if err != nil {
		return "", fmt.Errorf("leader label pod selector %q: %w", podSelector, err)
	}
	reqs, _ := ps.Requirements()
	return labels.Set{key: Value}.AsSelector().Add(reqs...).String(), nil
}
