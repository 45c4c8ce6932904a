// Command elector-lint is the repo's linter: go vet's own analyzers plus
// staticcheck, unused, errcheck and ineffassign (the set golangci-lint calls
// "standard"), run by the go command as a vet tool:
//
//	go vet -vettool=$(go -C hack/lint build -o /tmp/elector-lint . && echo /tmp/elector-lint) ./...
//
// hack/lint.sh does that for every module of the repo. As a vet tool it works
// on the compiler's export data and the go command caches each package's
// result, so it shares the build cache with go build and go test instead of
// type-checking every dependency again, and it builds in a fraction of
// golangci-lint's time (analyzers.go says which checks run and why).
package main

import "golang.org/x/tools/go/analysis/unitchecker"

func main() { unitchecker.Main(analyzers()...) }
