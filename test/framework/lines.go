package framework

import (
	"bytes"
	"sync"
)

// LineWriter is an io.Writer that calls Fn once per complete line (without
// the newline). Safe for concurrent use; use one per process so lines of
// different processes never mix.
type LineWriter struct {
	Fn  func(line string)
	mu  sync.Mutex
	buf []byte
}

// NewLineWriter returns a LineWriter calling fn.
func NewLineWriter(fn func(line string)) *LineWriter { return &LineWriter{Fn: fn} }

func (w *LineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		line := string(w.buf[:i])
		w.buf = w.buf[i+1:]
		w.Fn(line)
	}
	return len(p), nil
}

// SyncBuffer is a bytes.Buffer safe for concurrent use: a child process's
// (or goroutine's) output written while a test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
