package fencing

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func TestCheck(t *testing.T) {
	tests := []struct {
		name           string
		highest, token int64
		wantStale      bool
		wantErr        bool
	}{
		{name: "first token", highest: 0, token: 1},
		{name: "same token again", highest: 5, token: 5},
		{name: "higher token", highest: 5, token: 6},
		{name: "lower token", highest: 5, token: 4, wantStale: true, wantErr: true},
		{name: "zero after tokens", highest: 3, token: 0, wantStale: true, wantErr: true},
		{name: "negative token", highest: 0, token: -1, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check(tt.highest, tt.token)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Check(%d, %d) = %v, want error %v", tt.highest, tt.token, err, tt.wantErr)
			}
			if got := errors.Is(err, ErrStaleToken); got != tt.wantStale {
				t.Fatalf("errors.Is(%v, ErrStaleToken) = %v, want %v", err, got, tt.wantStale)
			}
			var ste *StaleTokenError
			if tt.wantStale && (!errors.As(err, &ste) || ste.Token != tt.token || ste.Highest != tt.highest) {
				t.Fatalf("want *StaleTokenError{%d, %d}, got %#v", tt.token, tt.highest, err)
			}
		})
	}
}

func TestFenceWriteSequence(t *testing.T) {
	ctx := context.Background()
	steps := []struct {
		token     int64
		value     string
		wantStale bool
		wantValue string
	}{
		{token: 1, value: "a", wantValue: "a"},
		{token: 1, value: "b", wantValue: "b"},
		{token: 3, value: "c", wantValue: "c"},
		{token: 2, value: "stale", wantStale: true, wantValue: "c"},
		{token: 1, value: "staler", wantStale: true, wantValue: "c"},
		{token: 3, value: "d", wantValue: "d"},
	}
	mem := NewMemory()
	f := New(mem)
	for i, s := range steps {
		err := f.Write(ctx, s.token, []byte(s.value))
		if got := errors.Is(err, ErrStaleToken); got != s.wantStale || (!s.wantStale && err != nil) {
			t.Fatalf("step %d: Write(%d) = %v, want stale %v", i, s.token, err, s.wantStale)
		}
		if _, v := mem.Read(); string(v) != s.wantValue {
			t.Fatalf("step %d: value %q, want %q", i, v, s.wantValue)
		}
	}
	if h, _ := mem.Read(); h != 3 {
		t.Fatalf("highest %d, want 3", h)
	}
}

// TestFenceConcurrentWriters races writers with different tokens. Whatever
// the interleaving, the final value must belong to the highest token, and no
// write may land after a higher token was accepted.
func TestFenceConcurrentWriters(t *testing.T) {
	ctx := context.Background()
	mem := NewMemory()
	rec := &recordingStore{Store: mem}
	f := New(rec)
	const writers, writes = 8, 200
	var wg sync.WaitGroup
	for w := 1; w <= writers; w++ {
		wg.Add(1)
		go func(token int64) {
			defer wg.Done()
			for i := 0; i < writes; i++ {
				err := f.Write(ctx, token, []byte(strconv.FormatInt(token, 10)))
				if err != nil && !errors.Is(err, ErrStaleToken) {
					t.Errorf("token %d: unexpected error %v", token, err)
					return
				}
			}
		}(int64(w))
	}
	wg.Wait()
	highest, v := mem.Read()
	if highest != writers || string(v) != strconv.Itoa(writers) {
		t.Fatalf("final highest=%d value=%q, want %d", highest, v, writers)
	}
	for i := 1; i < len(rec.committed); i++ {
		if rec.committed[i] < rec.committed[i-1] {
			t.Fatalf("commit %d has token %d after token %d", i, rec.committed[i], rec.committed[i-1])
		}
	}
	if len(rec.committed) == 0 {
		t.Fatal("no commit recorded")
	}
}

// recordingStore records the tokens of successful commits in order.
type recordingStore struct {
	Store
	mu        sync.Mutex
	committed []int64
}

func (r *recordingStore) Commit(ctx context.Context, version string, token Token, value []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	err := r.Store.Commit(ctx, version, token, value)
	if err == nil {
		r.committed = append(r.committed, token.Value)
	}
	return err
}

// flakyStore fails the first n commits with a conflict or another error.
type flakyStore struct {
	Store
	failures int
	err      error
}

func (s *flakyStore) Commit(ctx context.Context, version string, token Token, value []byte) error {
	if s.failures > 0 {
		s.failures--
		return s.err
	}
	return s.Store.Commit(ctx, version, token, value)
}

func TestFenceStoreErrors(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name     string
		failures int
		err      error
		wantErr  error
	}{
		{name: "conflicts then success", failures: 3, err: ErrConflict},
		{name: "too many conflicts", failures: DefaultMaxAttempts, err: fmt.Errorf("wrapped: %w", ErrConflict), wantErr: ErrConflict},
		{name: "store error is returned", failures: 1, err: boom, wantErr: boom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := NewMemory()
			f := New(&flakyStore{Store: mem, failures: tt.failures, err: tt.err})
			err := f.Write(context.Background(), 7, []byte("x"))
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Write: %v", err)
				}
				if h, v := mem.Read(); h != 7 || string(v) != "x" {
					t.Fatalf("store = (%d, %q), want (7, x)", h, v)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Write = %v, want %v", err, tt.wantErr)
			}
			if h, _ := mem.Read(); h != 0 {
				t.Fatalf("failed write changed the store: highest %d", h)
			}
		})
	}
}

func TestFenceCanceledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := New(NewMemory()).Write(ctx, 1, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Write = %v, want context.Canceled", err)
	}
}

func TestMemoryCommitRejectsStaleVersionAndToken(t *testing.T) {
	ctx := context.Background()
	m := NewMemory()
	_, _, v0, _ := m.Load(ctx)
	if err := m.Commit(ctx, v0, Token{Value: 5}, []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := m.Commit(ctx, v0, Token{Value: 6}, []byte("b")); !errors.Is(err, ErrConflict) {
		t.Fatalf("commit at old version = %v, want ErrConflict", err)
	}
	_, _, v1, _ := m.Load(ctx)
	if err := m.Commit(ctx, v1, Token{Value: 4}, []byte("c")); !errors.Is(err, ErrStaleToken) {
		t.Fatalf("commit of lower token = %v, want ErrStaleToken", err)
	}
	if h, v := m.Read(); h != 5 || string(v) != "a" {
		t.Fatalf("store = (%d, %q), want (5, a)", h, v)
	}
}

func TestCheckToken(t *testing.T) {
	tests := []struct {
		name             string
		highest, token   Token
		wantStale        bool
		wantOtherLease   bool
		wantErr          bool
		wantRecordedUID  string // the UID Accept records when accepted
		wantMsgSubstring string
	}{
		{name: "lower value", highest: Token{5, "a"}, token: Token{4, "a"}, wantStale: true, wantErr: true,
			wantMsgSubstring: "stale fencing token 4: resource already accepted token 5"},
		{name: "lower value, other lease", highest: Token{5, "a"}, token: Token{4, "b"}, wantStale: true, wantErr: true},
		{name: "lower value, no UIDs", highest: Token{5, ""}, token: Token{4, ""}, wantStale: true, wantErr: true},
		{name: "equal value, same UID", highest: Token{5, "a"}, token: Token{5, "a"}, wantRecordedUID: "a"},
		{name: "equal value, different UID", highest: Token{5, "a"}, token: Token{5, "b"}, wantStale: true, wantOtherLease: true, wantErr: true,
			wantMsgSubstring: "issued under lease UID b, but the resource already accepted token 5 under lease UID a"},
		{name: "equal value, token UID empty", highest: Token{5, "a"}, token: Token{5, ""}, wantRecordedUID: "a"},
		{name: "equal value, highest UID empty", highest: Token{5, ""}, token: Token{5, "b"}, wantRecordedUID: "b"},
		{name: "equal value, both UIDs empty", highest: Token{5, ""}, token: Token{5, ""}},
		{name: "higher value, new UID", highest: Token{5, "a"}, token: Token{6, "b"}, wantRecordedUID: "b"},
		{name: "higher value, same UID", highest: Token{5, "a"}, token: Token{6, "a"}, wantRecordedUID: "a"},
		{name: "higher value, UID empty", highest: Token{5, "a"}, token: Token{6, ""}, wantRecordedUID: ""},
		{name: "first token", highest: Token{}, token: Token{1, "a"}, wantRecordedUID: "a"},
		{name: "negative value", highest: Token{}, token: Token{-1, "a"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckToken(tt.highest, tt.token)
			if (err != nil) != tt.wantErr {
				t.Fatalf("CheckToken(%v, %v) = %v, want error %v", tt.highest, tt.token, err, tt.wantErr)
			}
			if got := errors.Is(err, ErrStaleToken); got != tt.wantStale {
				t.Fatalf("errors.Is(%v, ErrStaleToken) = %v, want %v", err, got, tt.wantStale)
			}
			if tt.wantStale {
				var ste *StaleTokenError
				if !errors.As(err, &ste) || ste.Token != tt.token.Value || ste.Highest != tt.highest.Value ||
					ste.LeaseUID != tt.token.LeaseUID || ste.HighestLeaseUID != tt.highest.LeaseUID {
					t.Fatalf("want *StaleTokenError{%v, %v}, got %#v", tt.token, tt.highest, err)
				}
				if ste.SameValueOtherLease() != tt.wantOtherLease {
					t.Fatalf("SameValueOtherLease() = %v, want %v", ste.SameValueOtherLease(), tt.wantOtherLease)
				}
			}
			if tt.wantMsgSubstring != "" && !strings.Contains(err.Error(), tt.wantMsgSubstring) {
				t.Fatalf("error %q does not say %q", err, tt.wantMsgSubstring)
			}
			rec, aerr := Accept(tt.highest, tt.token)
			if (aerr != nil) != tt.wantErr {
				t.Fatalf("Accept = %v, CheckToken = %v", aerr, err)
			}
			if aerr == nil && (rec.Value != tt.token.Value || rec.LeaseUID != tt.wantRecordedUID) {
				t.Fatalf("Accept records %v, want {%d %q}", rec, tt.token.Value, tt.wantRecordedUID)
			}
			// Without UIDs, CheckToken is Check.
			if cerr := Check(tt.highest.Value, tt.token.Value); (cerr != nil) != (tt.wantErr && !tt.wantOtherLease) {
				t.Fatalf("Check(%d, %d) = %v", tt.highest.Value, tt.token.Value, cerr)
			}
		})
	}
}

// TestFenceWriteTokenSequence: a Lease deleted and recreated hands out value 7
// again under a new UID; the fence keeps the first 7 and rejects the second,
// while UID-less writes keep the value-only rule and never erase the UID.
func TestFenceWriteTokenSequence(t *testing.T) {
	ctx := context.Background()
	steps := []struct {
		token     Token
		value     string
		wantStale bool
		wantHigh  Token
		wantValue string
	}{
		{token: Token{7, "uid-1"}, value: "a", wantHigh: Token{7, "uid-1"}, wantValue: "a"},
		{token: Token{7, "uid-1"}, value: "b", wantHigh: Token{7, "uid-1"}, wantValue: "b"},
		{token: Token{7, "uid-2"}, value: "reissued", wantStale: true, wantHigh: Token{7, "uid-1"}, wantValue: "b"},
		{token: Token{7, ""}, value: "no uid", wantHigh: Token{7, "uid-1"}, wantValue: "no uid"},
		{token: Token{7, "uid-2"}, value: "reissued again", wantStale: true, wantHigh: Token{7, "uid-1"}, wantValue: "no uid"},
		{token: Token{6, "uid-1"}, value: "lower", wantStale: true, wantHigh: Token{7, "uid-1"}, wantValue: "no uid"},
		{token: Token{8, "uid-2"}, value: "c", wantHigh: Token{8, "uid-2"}, wantValue: "c"},
		{token: Token{8, "uid-1"}, value: "other lease", wantStale: true, wantHigh: Token{8, "uid-2"}, wantValue: "c"},
		{token: Token{9, ""}, value: "d", wantHigh: Token{9, ""}, wantValue: "d"},
		{token: Token{9, "uid-3"}, value: "e", wantHigh: Token{9, "uid-3"}, wantValue: "e"},
	}
	mem := NewMemory()
	f := New(mem)
	for i, s := range steps {
		err := f.WriteToken(ctx, s.token, []byte(s.value))
		if got := errors.Is(err, ErrStaleToken); got != s.wantStale || (!s.wantStale && err != nil) {
			t.Fatalf("step %d: WriteToken(%v) = %v, want stale %v", i, s.token, err, s.wantStale)
		}
		h, v, _, err := mem.Load(ctx)
		if err != nil || h != s.wantHigh || string(v) != s.wantValue {
			t.Fatalf("step %d: Load = %v %q %v, want %v %q", i, h, v, err, s.wantHigh, s.wantValue)
		}
	}
}

func TestMemoryCommitKeepsLeaseUID(t *testing.T) {
	ctx := context.Background()
	m := NewMemory()
	_, _, v, _ := m.Load(ctx)
	if err := m.Commit(ctx, v, Token{4, "a"}, []byte("x")); err != nil {
		t.Fatal(err)
	}
	// A caller that skips the check and commits the same value without a UID
	// must not erase the UID, nor commit the same value under another UID.
	_, _, v, _ = m.Load(ctx)
	if err := m.Commit(ctx, v, Token{4, ""}, []byte("y")); err != nil {
		t.Fatal(err)
	}
	_, _, v, _ = m.Load(ctx)
	if err := m.Commit(ctx, v, Token{4, "b"}, []byte("z")); !errors.Is(err, ErrStaleToken) {
		t.Fatalf("commit of the same value under another UID = %v, want ErrStaleToken", err)
	}
	if h, val, _, _ := m.Load(ctx); h != (Token{4, "a"}) || string(val) != "y" {
		t.Fatalf("store = (%v, %q), want ({4 a}, y)", h, val)
	}
}
