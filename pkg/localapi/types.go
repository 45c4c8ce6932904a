package localapi

import (
	"github.com/elector-sidecar/elector-sidecar/pkg/api"
	"github.com/elector-sidecar/elector-sidecar/pkg/election"
)

// The response bodies of the local API are pkg/api's types (dependency-free,
// shared with pkg/client); the names here are aliases, so code that decodes
// into localapi.LeaderResponse keeps working.
type (
	LeaderResponse    = api.LeaderResponse
	TokenResponse     = api.TokenResponse
	ErrorResponse     = api.ErrorResponse
	NotLeaderResponse = api.NotLeaderResponse
	HealthResponse    = api.HealthResponse
)

// appState is the app's health as the /leader body shows it.
type appState uint8

const (
	appNone      appState = iota // no app health source: appHealthy absent
	appHealthy                   // "appHealthy":true
	appUnhealthy                 // "appHealthy":false
)

// The values AppHealthy points at (shared, never written).
var (
	boolTrue  = true
	boolFalse = false
)

// newLeaderResponse is the /leader body for s and the app's health.
func newLeaderResponse(s *election.Status, app appState) LeaderResponse {
	r := LeaderResponse{
		IsLeader:          s.IsLeader,
		Holder:            s.Holder,
		Identity:          s.Identity,
		Lease:             s.Lease,
		LeaseTransitions:  s.LeaseTransitions,
		Ready:             s.Ready,
		Candidate:         s.Candidate,
		NotCandidate:      s.NotCandidate,
		CannotLead:        s.CannotLead,
		IdentityCollision: s.IdentityCollision,
	}
	switch app {
	case appHealthy:
		r.AppHealthy = &boolTrue
	case appUnhealthy:
		r.AppHealthy = &boolFalse
	}
	if s.IsLeader {
		r.Token = s.Token
		r.ExpiresInMs = s.ExpiresIn.Milliseconds()
	}
	return r
}

// newTokenResponse is the /token body for s (a leader's status).
func newTokenResponse(s *election.Status) TokenResponse {
	return TokenResponse{Token: s.Token, Lease: s.Lease, LeaseUID: s.LeaseUID, ExpiresInMs: s.ExpiresIn.Milliseconds()}
}
