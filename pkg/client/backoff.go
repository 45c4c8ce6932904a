package client

import (
	"math/rand/v2"
	"time"
)

// Backoff is the pause between Watch's reconnections: Duration first, then
// multiplied by Factor at every Step up to Cap (0: no cap), each pause
// lengthened by a random part of up to Jitter times itself. It has the
// fields of k8s.io/apimachinery's wait.Backoff that Watch uses, without
// that module (this package imports no k8s.io module).
type Backoff struct {
	Duration time.Duration
	Factor   float64
	Jitter   float64
	Cap      time.Duration
}

// DefaultBackoff is the pause between Watch's reconnections: 100ms,
// doubling up to 5s, with 10% jitter. It starts over once a connection
// delivers an answer.
var DefaultBackoff = Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Cap: 5 * time.Second}

// Step returns the next pause and moves b to the one after it.
func (b *Backoff) Step() time.Duration {
	d := b.Duration
	if b.Factor > 0 {
		next := time.Duration(float64(b.Duration) * b.Factor)
		if b.Cap > 0 && (next > b.Cap || next < 0) {
			next = b.Cap
		}
		b.Duration = next
	}
	if b.Jitter > 0 {
		d += time.Duration(rand.Float64() * b.Jitter * float64(d))
	}
	return d
}
