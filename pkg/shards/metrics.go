package shards

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	moves     *prometheus.CounterVec
	apiErrors prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, s *Set) (*metrics, error) {
	m := &metrics{
		moves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "elector_shard_moves_total",
			Help: "Shards that moved to (in) or from (out) this member, by reason (rebalance, leaving, released, expired, free).",
		}, []string{"direction", "reason"}),
		apiErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "elector_shard_api_errors_total",
			Help: "Failed shard Lease writes (including lost compare-and-swap races).",
		}),
	}
	if reg == nil {
		return m, nil
	}
	held := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "elector_shards_held",
		Help: "Shards this member serves a token for now.",
	}, func() float64 { return float64(len(s.peek())) })
	for _, c := range []prometheus.Collector{m.moves, m.apiErrors, held} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, err
			}
		}
	}
	return m, nil
}
