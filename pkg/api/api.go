// Package api holds the wire types of elector-sidecar's local API (the
// bodies of GET /leader, /token, /healthz, /readyz and the error answers,
// and the data of /watch's events) and the limits a client needs to know.
// It imports nothing but the standard library, so that an app's client
// (pkg/client) does not pull in the sidecar's Kubernetes dependencies;
// pkg/localapi serves these types. docs/openapi.yaml describes the same
// API (TestOpenAPIDescribesEveryRoute checks it against the handler).
//
// Clients decode the bodies with encoding/json; the sidecar writes them with
// the AppendJSON methods, which produce exactly what encoding/json's Encoder
// produces for the same value, without the trailing newline.
package api

import "time"

// LeaderResponse is the body of GET /leader (200) and the data of /watch's
// "leader" events.
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

// EventLeader is the type of /watch's events ("event: leader"): a browser's
// EventSource delivers them to addEventListener("leader", ...), not to
// onmessage.
const EventLeader = "leader"

// Limits and defaults of the local API that clients depend on.
const (
	// DefaultURL is the local API in the default configuration; the Helm
	// chart and config/ give the app container its URL as EnvURL.
	DefaultURL = "http://127.0.0.1:4040"
	// EnvURL is the environment variable the chart and config/ set to
	// the local API's URL in the app container.
	EnvURL = "ELECTOR_URL"
	// ReleaseTimeout bounds a POST /release on the sidecar.
	ReleaseTimeout = 10 * time.Second
	// MaxWait caps GET /leader?wait=; a longer wait is a 400.
	MaxWait = 5 * time.Minute
	// MaxReleaseFor caps POST /release?for=; a longer time out is a 400.
	MaxReleaseFor = 24 * time.Hour
	// DefaultHeartbeat is the interval of /watch's ": heartbeat" comments.
	DefaultHeartbeat = 15 * time.Second
)
