package api

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// The hand-written encoders the sidecar writes its answers with: no
// reflection, no allocation beyond the output buffer, byte for byte what
// encoding/json's Encoder writes for the same value without its trailing
// newline (TestEncodersMatchEncodingJSON in pkg/localapi).

// AppendJSON appends r as JSON to b.
func (r *LeaderResponse) AppendJSON(b []byte) []byte {
	b = r.AppendJSONUntilExpiry(b)
	return AppendExpiry(b, r.ExpiresInMs)
}

// AppendJSONUntilExpiry appends r as JSON to b without ExpiresInMs and the
// closing brace; AppendExpiry completes it. The sidecar encodes a /watch
// event once for every stream this way, each stream adding the validity
// left when it writes.
func (r *LeaderResponse) AppendJSONUntilExpiry(b []byte) []byte {
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
	return b
}

// AppendExpiry completes what AppendJSONUntilExpiry began: expiresInMs
// (left out when 0) and the closing brace.
func AppendExpiry(b []byte, expiresInMs int64) []byte {
	if expiresInMs != 0 {
		b = append(b, `,"expiresInMs":`...)
		b = strconv.AppendInt(b, expiresInMs, 10)
	}
	return append(b, '}')
}

// AppendJSON appends r as JSON to b.
func (r *TokenResponse) AppendJSON(b []byte) []byte {
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

// AppendJSON appends r as JSON to b.
func (r *ErrorResponse) AppendJSON(b []byte) []byte {
	b = append(b, `{"error":`...)
	b = appendString(b, r.Error)
	return append(b, '}')
}

// AppendJSON appends r as JSON to b.
func (r *NotLeaderResponse) AppendJSON(b []byte) []byte {
	b = append(b, `{"error":`...)
	b = appendString(b, r.Error)
	b = append(b, `,"holder":`...)
	b = appendString(b, r.Holder)
	return append(b, '}')
}

// AppendJSON appends r as JSON to b.
func (r *HealthResponse) AppendJSON(b []byte) []byte {
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
