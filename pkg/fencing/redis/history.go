package redis

import (
	"context"
	"fmt"
	"strconv"

	goredis "github.com/redis/go-redis/v9"

	"github.com/elector-sidecar/elector-sidecar/pkg/fencing"
)

// Entry is one accepted write in the history stream.
type Entry struct {
	// ID is the stream entry ID (Redis's order of the writes).
	ID string
	// Token is the token recorded by the write (with its Lease UID).
	Token   fencing.Token
	Writer  string
	Version int64
}

// History returns the history stream, oldest first (what the history limit
// kept: about DefaultHistoryLimit entries unless WithHistoryLimit says
// otherwise). Every accepted write appended one entry in the
// same script as the write, so the tokens never go down; a soak checks that
// from Redis's own record.
func (f *Fence) History(ctx context.Context) ([]Entry, error) {
	if f.err != nil {
		return nil, f.err
	}
	msgs, err := f.client.XRange(ctx, f.keys.History, "-", "+").Result()
	if err != nil {
		return nil, fmt.Errorf("redis fence %s: history: %w", f.keys.History, err)
	}
	out := make([]Entry, 0, len(msgs))
	for _, m := range msgs {
		e, err := parseEntry(m)
		if err != nil {
			return nil, fmt.Errorf("redis fence %s: history entry %s: %w", f.keys.History, m.ID, err)
		}
		out = append(out, e)
	}
	return out, nil
}

func parseEntry(m goredis.XMessage) (Entry, error) {
	str := func(k string) string { s, _ := m.Values[k].(string); return s }
	token, err := strconv.ParseInt(str("token"), 10, 64)
	if err != nil {
		return Entry{}, fmt.Errorf("token: %w", err)
	}
	version, err := strconv.ParseInt(str("version"), 10, 64)
	if err != nil {
		return Entry{}, fmt.Errorf("version: %w", err)
	}
	return Entry{ID: m.ID, Token: fencing.Token{Value: token, LeaseUID: str("uid")}, Writer: str("writer"), Version: version}, nil
}
