package client

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/elector-sidecar/elector-sidecar/pkg/api"
)

// FromEnv returns a client of the local API at $ELECTOR_URL, the variable
// the Helm chart and config/'s samples set in the app container
// (api.EnvURL), or at DefaultURL when it is unset or empty. A malformed
// $ELECTOR_URL is an error that names the variable.
func FromEnv(opts ...Option) (*Client, error) {
	u := os.Getenv(api.EnvURL)
	c, err := New(u, opts...)
	if err != nil {
		return nil, fmt.Errorf("$%s: %w", api.EnvURL, err)
	}
	return c, nil
}

// ErrLeadershipEnded is the cause (context.Cause) of the context
// RunWhileLeading gives fn when it ends because this pod's term did: the
// pod no longer leads, the token changed, or the sidecar did not vouch for
// the token in time (unreachable, hung, or the stream stalled past the
// last expiresInMs).
var ErrLeadershipEnded = errors.New("leadership ended")

// RunWhileLeading runs fn while this pod leads, like client-go's
// OnStartedLeading, until ctx ends; then it returns ctx.Err() once fn has
// returned. Every time Watch reports that this pod leads with a token it has
// not run fn for, RunWhileLeading reads GET /token and calls fn in a
// goroutine of its own with that token and a context that is cancelled
// (cause: an error matching ErrLeadershipEnded, see context.Cause) as soon
// as the token stops being valid:
//
//   - the sidecar says this pod no longer leads (another holder, a
//     release, renewals failing);
//   - the token changed (fn then returns and is called again with the new
//     one);
//   - the last isLeader:true's expiresInMs ran out with no renewal, or the
//     sidecar cannot be reached: Watch's unknown state.
//
// The context also ends with ctx. fn must return when its context is done:
// the next term's fn starts only after the previous one has returned, so
// two calls never overlap. A fn that returns early is not called again in
// the same term. Still fence every write with the token (fn's tok.Fencing()):
// the context is cancelled when the client learns that the term ended,
// which may be later than the moment it did.
func (c *Client) RunWhileLeading(ctx context.Context, fn func(ctx context.Context, tok Token)) error {
	if fn == nil {
		return errors.New("client.RunWhileLeading: fn is nil")
	}
	var (
		term   int64 // the token fn was last called with
		cancel context.CancelCauseFunc
		done   chan struct{}
	)
	stop := func(cause error) {
		if cancel != nil {
			cancel(cause)
			<-done
			cancel, done = nil, nil
		}
	}
	err := c.Watch(ctx, func(st api.LeaderResponse) {
		if st.IsLeader && st.Token == term {
			return // a renewal of the term fn runs (or ran) in
		}
		stop(endOf(st, term))
		term = 0 // that term is over: the same token may start fn again (after an unknown state)
		if !st.IsLeader {
			return
		}
		tok, err := c.Token(ctx)
		if err != nil || tok.Token != st.Token {
			// The term ended meanwhile, or the sidecar did not answer: the
			// next state (every renewal is one) tries again.
			if err == nil {
				err = fmt.Errorf("GET /token answered token %d, the stream said %d", tok.Token, st.Token)
			}
			if c.onError != nil {
				c.onError(fmt.Errorf("RunWhileLeading: %w", err))
			}
			return
		}
		term = tok.Token
		var lctx context.Context
		lctx, cancel = context.WithCancelCause(ctx)
		done = make(chan struct{})
		go func(ctx context.Context, done chan struct{}) {
			defer close(done)
			fn(ctx, tok)
		}(lctx, done)
	})
	stop(context.Cause(ctx))
	return err
}

// endOf says why the term with token term ended, given the state st.
func endOf(st api.LeaderResponse, term int64) error {
	switch {
	case IsUnknown(st):
		return fmt.Errorf("%w: the sidecar did not vouch for token %d in time (unreachable, hung, or the stream stalled)", ErrLeadershipEnded, term)
	case st.IsLeader:
		return fmt.Errorf("%w: the token changed from %d to %d", ErrLeadershipEnded, term, st.Token)
	case st.Holder == "":
		return fmt.Errorf("%w: token %d stopped; nobody holds the lease", ErrLeadershipEnded, term)
	default:
		return fmt.Errorf("%w: token %d stopped; %s holds the lease", ErrLeadershipEnded, term, st.Holder)
	}
}
