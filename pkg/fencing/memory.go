package fencing

import (
	"context"
	"fmt"
	"strconv"
	"sync"
)

// Memory is an in-memory Store, safe for concurrent use: a fenced register
// for tests, demos, and resources that live in one process.
type Memory struct {
	mu      sync.Mutex
	highest Token
	value   []byte
	version uint64
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty Memory store (highest token 0, no Lease UID).
func NewMemory() *Memory { return &Memory{} }

// Load implements Store.
func (m *Memory) Load(_ context.Context) (Token, []byte, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.highest, clone(m.value), strconv.FormatUint(m.version, 10), nil
}

// Commit implements Store. It also re-checks the token under the lock
// (Accept), so a Memory can never record a lower token, or drop the Lease UID
// of its highest, even if a caller skips the check.
func (m *Memory) Commit(_ context.Context, version string, token Token, value []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if version != strconv.FormatUint(m.version, 10) {
		return fmt.Errorf("memory store at version %d, not %s: %w", m.version, version, ErrConflict)
	}
	record, err := Accept(m.highest, token)
	if err != nil {
		return err
	}
	m.highest = record
	m.value = clone(value)
	m.version++
	return nil
}

// Read returns the highest accepted token's value and the current value
// (Load also returns the highest token's Lease UID).
func (m *Memory) Read() (int64, []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.highest.Value, clone(m.value)
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}
