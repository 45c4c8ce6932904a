package election

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	acquisitions  prometheus.Counter
	releases      prometheus.Counter
	losses        *prometheus.CounterVec
	renewDuration prometheus.Histogram
	apiErrors     *prometheus.CounterVec
	collisions    prometheus.Counter
	handoffs      *prometheus.CounterVec
	// handoffsAccepted and handoffsGiven are handoffs' two series.
	handoffsAccepted, handoffsGiven prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, e *Elector) (*metrics, error) {
	m := &metrics{
		acquisitions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "elector_acquisitions_total",
			Help: "Times this process acquired the Lease (each one issued a new fencing token).",
		}),
		releases: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "elector_releases_total",
			Help: "Times this process stepped down voluntarily (release request or shutdown).",
		}),
		losses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "elector_losses_total",
			Help: "Terms lost involuntarily, by reason (renew_deadline, taken, deleted, recreated, superseded).",
		}, []string{"reason"}),
		renewDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "elector_renew_duration_seconds",
			Help:    "Latency of Lease renew requests.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		apiErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "elector_api_errors_total",
			Help: "Failed API server requests (including lost compare-and-swap races), by verb.",
		}, []string{"verb"}),
		collisions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "elector_identity_collisions_total",
			Help: "Writes seen from another process with this process's identity (identities must be unique).",
		}),
		handoffs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "elector_handoffs_total",
			Help: "Direct handoffs: given (this leader wrote the Lease held by a successor) and accepted (this process took one).",
		}, []string{"role"}),
	}
	m.handoffsAccepted, m.handoffsGiven = m.handoffs.WithLabelValues("accepted"), m.handoffs.WithLabelValues("given")
	for _, r := range lossReasons {
		m.losses.WithLabelValues(string(r))
	}
	if reg == nil {
		return m, nil
	}
	status := func(f func(Status) float64) func() float64 {
		return func() float64 { return f(e.Status()) }
	}
	collectors := []prometheus.Collector{
		m.acquisitions, m.releases, m.losses, m.renewDuration, m.apiErrors, m.collisions, m.handoffs,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "elector_cannot_lead",
			Help: "1 while this process cannot be issued a token at all (leaseTransitions exhausted; /leader says why), else 0.",
		}, status(func(s Status) float64 { return b2f(s.CannotLead != "") })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "elector_is_leader",
			Help: "1 while this process leads and its fencing token is safe to use, else 0.",
		}, status(func(s Status) float64 { return b2f(s.IsLeader) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "elector_token",
			Help: "Fencing token of this process's latest term (0: none yet).",
		}, status(func(s Status) float64 { return float64(s.LastToken) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "elector_lease_transitions",
			Help: "spec.leaseTransitions of the Lease as last observed.",
		}, status(func(s Status) float64 { return float64(s.LeaseTransitions) })),
	}
	var errs []error
	for _, c := range collectors {
		errs = append(errs, reg.Register(c))
	}
	return m, errors.Join(errs...)
}

func (m *metrics) apiError(verb string) { m.apiErrors.WithLabelValues(verb).Inc() }

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
