package client

import "github.com/elector-sidecar/elector-sidecar/pkg/localapi"

// SetReceivedHook calls f with every state Watch's reader hands over (tests
// wait on it instead of sleeping); the returned func removes it.
func SetReceivedHook(f func(localapi.LeaderResponse)) func() {
	testHookReceived = f
	return func() { testHookReceived = nil }
}
