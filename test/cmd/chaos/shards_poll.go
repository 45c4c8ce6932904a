package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/elector-sidecar/elector-sidecar/test/framework"
)

// The shard soak's view of its processes: GET /shards, asked by the writers
// (the shards a process owns, with their tokens) and sampled for the
// invariants (a poller per process, its answers turned into per-shard
// samples).

// shardsBody is the part of GET /shards the soak reads.
type shardsBody struct {
	Ready bool `json:"ready"`
	Live  bool `json:"live"`
	Owned []struct {
		Index       int    `json:"index"`
		Lease       string `json:"lease"`
		LeaseUID    string `json:"leaseUID"`
		Token       int64  `json:"token"`
		ExpiresInMs int64  `json:"expiresInMs"`
	} `json:"owned"`
}

// getShards asks c's GET /shards.
func (ss *shardSoak) getShards(ctx context.Context, c *framework.Candidate) (shardsBody, int, error) {
	var b shardsBody
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL+"/shards", nil)
	if err != nil {
		return b, 0, err
	}
	resp, err := ss.httpc.Do(req)
	if err != nil {
		return b, 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return b, resp.StatusCode, err
	}
	if resp.StatusCode != http.StatusOK {
		return b, resp.StatusCode, nil
	}
	return b, resp.StatusCode, json.Unmarshal(body, &b)
}

// waitAllOwned waits until the running processes together own every shard.
func (ss *shardSoak) waitAllOwned(ctx context.Context, timeout time.Duration) error {
	var missing []int
	err := framework.Eventually(ctx, 100*time.Millisecond, timeout, "every shard owned by a running process", func(ctx context.Context) error {
		owned := make([]bool, ss.n)
		for _, c := range ss.g.Running() {
			b, code, err := ss.getShards(ctx, c)
			if err != nil || code != http.StatusOK {
				continue
			}
			for _, o := range b.Owned {
				if o.Index >= 0 && o.Index < ss.n && o.ExpiresInMs > 0 {
					owned[o.Index] = true
				}
			}
		}
		missing = missing[:0]
		for i, ok := range owned {
			if !ok {
				missing = append(missing, i)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("shards %v owned by no process", missing)
		}
		return nil
	})
	return err
}

// pollNewInstances starts a /shards poller for every instance the group
// starts, until the soak stops polling.
func (ss *shardSoak) pollNewInstances() {
	for ss.pollCtx.Err() == nil {
		for _, c := range ss.g.All() {
			ss.smu.Lock()
			seen := ss.polled[c.Instance]
			ss.polled[c.Instance] = true
			ss.smu.Unlock()
			if !seen && !c.Exited() {
				ss.pollers.Add(1)
				go func() { defer ss.pollers.Done(); ss.poll(c) }()
			}
		}
		select {
		case <-ss.pollCtx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// pollInterval is the time between two /shards samples of one process.
const pollInterval = 30 * time.Millisecond

// poll samples c's GET /shards until it exits: every owned shard is a valid
// sample of that shard; a shard no longer owned gets one invalid sample,
// which ends the process's term on it (framework.TermsOf).
func (ss *shardSoak) poll(c *framework.Candidate) {
	prev := make([]bool, ss.n)
	for ss.pollCtx.Err() == nil && !c.Exited() {
		sent := time.Now()
		b, code, err := ss.getShards(ss.pollCtx, c)
		recv := time.Now()
		if ss.pollCtx.Err() != nil {
			return
		}
		ss.smu.Lock()
		for i, x := range shardSamples(c.Instance, b, code, err, sent, recv, prev) {
			if x != nil {
				ss.samples[i] = append(ss.samples[i], *x)
			}
		}
		ss.smu.Unlock()
		select {
		case <-ss.pollCtx.Done():
			return
		case <-c.Done():
			return
		case <-time.After(pollInterval):
		}
	}
}

// shardSamples turns one /shards answer of instance into a sample per
// shard (nil: nothing to record): a valid one for every shard it owns with
// validity left, and an invalid one for a shard prev says it owned in its
// last answer and owns no more (a 200 without it counts as a 409), which
// ends its term on that shard. prev is updated.
func shardSamples(instance string, b shardsBody, code int, err error, sent, recv time.Time, prev []bool) []*framework.Sample {
	out := make([]*framework.Sample, len(prev))
	if err == nil && code == http.StatusOK {
		for _, o := range b.Owned {
			if o.Index < 0 || o.Index >= len(prev) || o.ExpiresInMs <= 0 {
				continue
			}
			out[o.Index] = &framework.Sample{Target: instance, TokenResult: framework.TokenResult{Status: http.StatusOK,
				Token: o.Token, Lease: o.Lease, LeaseUID: o.LeaseUID, ExpiresInMs: o.ExpiresInMs, Sent: sent, Received: recv}}
		}
	}
	for i := range prev {
		switch {
		case out[i] != nil:
			prev[i] = true
		case prev[i]:
			st := code
			if st == http.StatusOK {
				st = http.StatusConflict
			}
			out[i] = &framework.Sample{Target: instance, TokenResult: framework.TokenResult{Status: st, Err: err, Sent: sent, Received: recv}}
			prev[i] = false
		}
	}
	return out
}
