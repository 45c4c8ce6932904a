// Package testsupport holds the test helpers that the root module's own unit
// tests share with the test module (github.com/elector-sidecar/elector-sidecar/test):
// condition waits over apimachinery's wait package and the Markdown code-block
// reader that keeps README snippets exercised. It imports nothing heavier than
// apimachinery, so the root module needs no test-only dependency for them;
// test/framework re-exports them for the harnesses.
package testsupport
