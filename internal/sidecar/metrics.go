package sidecar

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/elector-sidecar/elector-sidecar/pkg/version"
)

// LeaseLabel is the label on every elector_* metric: the Lease as
// "namespace/name", so that `sum by (lease) (elector_is_leader) != 1` finds
// a Lease without exactly one leader across all pods and Leases.
const LeaseLabel = "lease"

// newRegistry returns the registry that /metrics serves and the registerer
// for the elector_* metrics (election, app health, leader label), which
// adds lease="<namespace>/<name>" to each of them. It registers
// elector_build_info there, and the Go and process collectors unlabelled.
func newRegistry(leaseKey string) (*prometheus.Registry, prometheus.Registerer) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	electorReg := prometheus.WrapRegistererWith(prometheus.Labels{LeaseLabel: leaseKey}, reg)
	electorReg.MustRegister(buildInfo())
	return reg, electorReg
}

// buildInfo is elector_build_info{version,goversion,revision} 1.
func buildInfo() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "elector_build_info",
		Help: "Always 1; the labels say which build of elector-sidecar runs.",
		ConstLabels: prometheus.Labels{
			"version":   version.Version,
			"goversion": runtime.Version(),
			"revision":  version.GetRevision(),
		},
	})
	g.Set(1)
	return g
}
