package shards

import (
	"math/rand/v2"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// quietWorld is a simulator world with no faults: the scripted tests'.
func quietWorld(members int) *simWorld {
	w := &simWorld{cfg: simConfig{Config: simTimings(), shards: 4}, faults: map[string]float64{},
		schedRand: rand.New(rand.NewPCG(1, 1)), faultRand: rand.New(rand.NewPCG(2, 2)), delayRand: rand.New(rand.NewPCG(3, 3)),
		lastCommitted: map[string]*coordinationv1.Lease{}}
	w.srv = &simServer{w: w, leases: map[string]*coordinationv1.Lease{}}
	w.chk = newSimChecker(w)
	for k := range members {
		w.start(string(rune('a' + k)))
	}
	return w
}

func TestHolderThatCannotSeeItsDeletedShardStopsServingItALeaseDurationAfterItsLastConfirmation(t *testing.T) {
	w := quietWorld(2)
	w.run(20*time.Second, time.Hour)
	if why := w.fairNow(); why != "" {
		t.Fatalf("not settled: %s", why)
	}
	a := w.procs[0]
	i := a.set.peek()[0]
	// a hears nothing more and its lists fail; its session still renews.
	a.deaf, a.noList = true, true
	confirmed := a.set.shards[i].confirmed
	_ = w.srv.delete(ShardLeaseName(w.cfg.Name, i), nil, "adversary")
	end := a.toGlobal(confirmed.Add(w.cfg.LeaseDuration - w.cfg.ClockSkewMargin))
	w.run(end-time.Millisecond, time.Hour)
	if !a.set.Status().Live {
		t.Fatal("a's session ended: the test needs it valid")
	}
	w.run(end+time.Millisecond, time.Hour)
	for _, o := range a.set.Status().Owned {
		if o.Index == i {
			t.Fatalf("a still serves shard %d (token %d) %v after its last confirmation, its Lease deleted", i, o.Token, w.cfg.LeaseDuration)
		}
	}
	if w.chk.failed() {
		t.Fatal(w.chk.errs[0])
	}
}
