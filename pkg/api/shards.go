package api

import "strconv"

// The wire types of a shard set's local API (a sidecar started with
// --shards=N): GET /shards, GET /shards/{i}/token and /watch's "shards"
// events. In that mode GET /leader and GET /token answer 404.

// ShardsResponse is the body of GET /shards (200) and the data of /watch's
// "shards" events.
type ShardsResponse struct {
	// Set is the set's "namespace/name"; Identity is this member's.
	Set      string `json:"set"`
	Identity string `json:"identity"`
	// Shards is N: the set's shards are 0 … N-1.
	Shards int `json:"shards"`
	// Ready: the set's Leases have been listed since start.
	Ready bool `json:"ready"`
	// Live: this member's session is valid (it may hold shards).
	Live bool `json:"live"`
	// Members are the live members as this member sees them, sorted.
	Members []string `json:"members"`
	// Owned are the shards this member may work on now, by index, each
	// with its own fencing token.
	Owned []ShardToken `json:"owned"`
}

// ShardToken is one shard this member holds: the body of GET
// /shards/{i}/token (200) and an element of ShardsResponse.Owned.
type ShardToken struct {
	Index int `json:"index"`
	// Lease is the shard's Lease, "namespace/name"; LeaseUID tells a
	// recreated Lease apart.
	Lease    string `json:"lease"`
	LeaseUID string `json:"leaseUID"`
	// Token is the shard's fencing token (its Lease's leaseTransitions).
	Token int64 `json:"token"`
	// ExpiresInMs bounds how long the token may be used, rounded down.
	ExpiresInMs int64 `json:"expiresInMs"`
}

// NotShardOwnerResponse is the body of GET /shards/{i}/token's 409: this
// member does not hold shard Index (another member does, or nobody).
type NotShardOwnerResponse struct {
	Error string `json:"error"`
	Index int    `json:"index"`
}

// EventShards is the type of /watch's events in shard mode ("event:
// shards"), each with a ShardsResponse.
const EventShards = "shards"

// AppendJSON appends r as JSON to b.
func (r *ShardsResponse) AppendJSON(b []byte) []byte {
	b = r.AppendJSONUntilOwned(b)
	if r.Owned == nil {
		return append(b, "null}"...)
	}
	b = append(b, '[')
	for i := range r.Owned {
		if i > 0 {
			b = append(b, ',')
		}
		b = r.Owned[i].AppendJSON(b)
	}
	return append(b, "]}"...)
}

// AppendJSONUntilOwned appends r as JSON to b up to the value of "owned":
// the sidecar encodes a /watch event once for every stream, each stream
// adding every shard's validity left when it writes (ShardToken's
// AppendJSONUntilExpiry, AppendShardExpiry).
func (r *ShardsResponse) AppendJSONUntilOwned(b []byte) []byte {
	b = append(b, `{"set":`...)
	b = appendString(b, r.Set)
	b = append(b, `,"identity":`...)
	b = appendString(b, r.Identity)
	b = append(b, `,"shards":`...)
	b = strconv.AppendInt(b, int64(r.Shards), 10)
	b = append(b, `,"ready":`...)
	b = strconv.AppendBool(b, r.Ready)
	b = append(b, `,"live":`...)
	b = strconv.AppendBool(b, r.Live)
	b = append(b, `,"members":`...)
	if r.Members == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, m := range r.Members {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, m)
		}
		b = append(b, ']')
	}
	return append(b, `,"owned":`...)
}

// AppendJSON appends t as JSON to b.
func (t *ShardToken) AppendJSON(b []byte) []byte {
	return AppendShardExpiry(t.AppendJSONUntilExpiry(b), t.ExpiresInMs)
}

// AppendJSONUntilExpiry appends t as JSON to b without ExpiresInMs and the
// closing brace; AppendShardExpiry completes it.
func (t *ShardToken) AppendJSONUntilExpiry(b []byte) []byte {
	b = append(b, `{"index":`...)
	b = strconv.AppendInt(b, int64(t.Index), 10)
	b = append(b, `,"lease":`...)
	b = appendString(b, t.Lease)
	b = append(b, `,"leaseUID":`...)
	b = appendString(b, t.LeaseUID)
	b = append(b, `,"token":`...)
	b = strconv.AppendInt(b, t.Token, 10)
	return b
}

// AppendShardExpiry completes what ShardToken's AppendJSONUntilExpiry
// began: expiresInMs (always present) and the closing brace.
func AppendShardExpiry(b []byte, expiresInMs int64) []byte {
	b = append(b, `,"expiresInMs":`...)
	b = strconv.AppendInt(b, expiresInMs, 10)
	return append(b, '}')
}

// AppendJSON appends r as JSON to b.
func (r *NotShardOwnerResponse) AppendJSON(b []byte) []byte {
	b = append(b, `{"error":`...)
	b = appendString(b, r.Error)
	b = append(b, `,"index":`...)
	b = strconv.AppendInt(b, int64(r.Index), 10)
	return append(b, '}')
}
