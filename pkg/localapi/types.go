package localapi

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/elector-sidecar/elector-sidecar/pkg/election"
)

// The response bodies of the local API. Clients decode them with
// encoding/json; the server writes them with the hand-written appendJSON
// methods below (no reflection, no allocation beyond the output buffer),
// which produce exactly what encoding/json's Encoder produces for the same
// value, without the trailing newline (TestEncodersMatchEncodingJSON).

// LeaderResponse is the body of GET /leader (200).
type LeaderResponse struct {
	// IsLeader: this pod leads and its token is safe to use now.
	IsLeader bool `json:"isLeader"`
	// Holder is the Lease's holderIdentity as last observed ("": free).
	Holder string `json:"holder"`
	// Identity is this pod's identity; Lease is "namespace/name".
	Identity string `json:"identity"`
	Lease    string `json:"lease"`
	// LeaseTransitions as last observed.
	LeaseTransitions int64 `json:"leaseTransitions"`
	// Ready: the Lease has been observed (found or not) since start.
	Ready bool `json:"ready"`
	// Candidate: this pod campaigns (it may take the Lease when it is free
	// or expires). When false, NotCandidate says why: the app is unhealthy,
	// or a POST /release?for= time out ("released for 4m59s", counting
	// down).
	Candidate    bool   `json:"candidate"`
	NotCandidate string `json:"notCandidate,omitempty"`
	// CannotLead, when present, says why no token can be issued to any
	// candidate until an operator acts (leaseTransitions exhausted).
	CannotLead string `json:"cannotLead,omitempty"`
	// IdentityCollision, when present, says that another process wrote
	// the Lease with this pod's identity: identities must be unique.
	IdentityCollision string `json:"identityCollision,omitempty"`
	// AppHealthy is present only when the sidecar probes the app
	// (--app-health-url): the app's health as last judged.
	AppHealthy *bool `json:"appHealthy,omitempty"`
	// Token and ExpiresInMs are present only when IsLeader. ExpiresInMs
	// is the validity left, rounded down; it is absent (0) in the last
	// millisecond of a term.
	Token       int64 `json:"token,omitempty"`
	ExpiresInMs int64 `json:"expiresInMs,omitempty"`
}

// TokenResponse is the body of GET /token when this pod leads (200).
type TokenResponse struct {
	Token int64 `json:"token"`
	// Lease is "namespace/name"; LeaseUID tells a recreated Lease apart.
	Lease    string `json:"lease"`
	LeaseUID string `json:"leaseUID"`
	// ExpiresInMs bounds how long this answer may be used, rounded down.
	ExpiresInMs int64 `json:"expiresInMs"`
}

// ErrorResponse is the body of every error answer except GET /token's 409.
type ErrorResponse struct {
	Error string `json:"error"`
}

// NotLeaderResponse is the body of GET /token's 409: another pod leads
// (Holder), or nobody does (Holder is ""). Decoding any /token error into it
// is fine: Holder is then "".
type NotLeaderResponse struct {
	Error  string `json:"error"`
	Holder string `json:"holder"`
}

// HealthResponse is the body of GET /healthz ("ok") and GET /readyz
// ("ready") when they answer 200.
type HealthResponse struct {
	Status string `json:"status"`
}

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

func (r *LeaderResponse) appendJSON(b []byte) []byte {
	b = append(b, `{"isLeader":`...)
	b = strconv.AppendBool(b, r.IsLeader)
	b = append(b, `,"holder":`...)
	b = appendString(b, r.Holder)
	b = append(b, `,"identity":`...)
	b = appendString(b, r.Identity)
	b = append(b, `,"lease":`...)
	b = appendString(b, r.Lease)
	b = append(b, `,"leaseTransitions":`...)
	b = strconv.AppendInt(b, r.LeaseTransitions, 10)
	b = append(b, `,"ready":`...)
	b = strconv.AppendBool(b, r.Ready)
	b = append(b, `,"candidate":`...)
	b = strconv.AppendBool(b, r.Candidate)
	if r.NotCandidate != "" {
		b = append(b, `,"notCandidate":`...)
		b = appendString(b, r.NotCandidate)
	}
	if r.CannotLead != "" {
		b = append(b, `,"cannotLead":`...)
		b = appendString(b, r.CannotLead)
	}
	if r.IdentityCollision != "" {
		b = append(b, `,"identityCollision":`...)
		b = appendString(b, r.IdentityCollision)
	}
	if r.AppHealthy != nil {
		b = append(b, `,"appHealthy":`...)
		b = strconv.AppendBool(b, *r.AppHealthy)
	}
	if r.Token != 0 {
		b = append(b, `,"token":`...)
		b = strconv.AppendInt(b, r.Token, 10)
	}
	if r.ExpiresInMs != 0 {
		b = append(b, `,"expiresInMs":`...)
		b = strconv.AppendInt(b, r.ExpiresInMs, 10)
	}
	return append(b, '}')
}

func (r *TokenResponse) appendJSON(b []byte) []byte {
	b = append(b, `{"token":`...)
	b = strconv.AppendInt(b, r.Token, 10)
	b = append(b, `,"lease":`...)
	b = appendString(b, r.Lease)
	b = append(b, `,"leaseUID":`...)
	b = appendString(b, r.LeaseUID)
	b = append(b, `,"expiresInMs":`...)
	b = strconv.AppendInt(b, r.ExpiresInMs, 10)
	return append(b, '}')
}

func (r *ErrorResponse) appendJSON(b []byte) []byte {
	b = append(b, `{"error":`...)
	b = appendString(b, r.Error)
	return append(b, '}')
}

func (r *NotLeaderResponse) appendJSON(b []byte) []byte {
	b = append(b, `{"error":`...)
	b = appendString(b, r.Error)
	b = append(b, `,"holder":`...)
	b = appendString(b, r.Holder)
	return append(b, '}')
}

func (r *HealthResponse) appendJSON(b []byte) []byte {
	b = append(b, `{"status":`...)
	b = appendString(b, r.Status)
	return append(b, '}')
}

// appendString appends s as a JSON string the way encoding/json writes it
// (HTML-safe): plain printable ASCII is copied, anything else goes through
// encoding/json.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
