package election

import (
	"crypto/rand"
	"encoding/hex"
)

// newIncarnation returns this process's mark: 64 random bits, hex.
func newIncarnation() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	return hex.EncodeToString(b[:])
}
