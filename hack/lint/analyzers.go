package main

import (
	"slices"
	"sync"

	"github.com/gordonklaus/ineffassign/pkg/ineffassign"
	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/passes/appends"
	"golang.org/x/tools/go/analysis/passes/asmdecl"
	"golang.org/x/tools/go/analysis/passes/assign"
	"golang.org/x/tools/go/analysis/passes/atomic"
	"golang.org/x/tools/go/analysis/passes/bools"
	"golang.org/x/tools/go/analysis/passes/buildtag"
	"golang.org/x/tools/go/analysis/passes/cgocall"
	"golang.org/x/tools/go/analysis/passes/composite"
	"golang.org/x/tools/go/analysis/passes/copylock"
	"golang.org/x/tools/go/analysis/passes/defers"
	"golang.org/x/tools/go/analysis/passes/directive"
	"golang.org/x/tools/go/analysis/passes/errorsas"
	"golang.org/x/tools/go/analysis/passes/framepointer"
	"golang.org/x/tools/go/analysis/passes/hostport"
	"golang.org/x/tools/go/analysis/passes/httpresponse"
	"golang.org/x/tools/go/analysis/passes/ifaceassert"
	"golang.org/x/tools/go/analysis/passes/inline"
	"golang.org/x/tools/go/analysis/passes/loopclosure"
	"golang.org/x/tools/go/analysis/passes/lostcancel"
	"golang.org/x/tools/go/analysis/passes/nilfunc"
	"golang.org/x/tools/go/analysis/passes/printf"
	"golang.org/x/tools/go/analysis/passes/shift"
	"golang.org/x/tools/go/analysis/passes/sigchanyzer"
	"golang.org/x/tools/go/analysis/passes/slog"
	"golang.org/x/tools/go/analysis/passes/stdmethods"
	"golang.org/x/tools/go/analysis/passes/stdversion"
	"golang.org/x/tools/go/analysis/passes/stringintconv"
	"golang.org/x/tools/go/analysis/passes/structtag"
	"golang.org/x/tools/go/analysis/passes/testinggoroutine"
	"golang.org/x/tools/go/analysis/passes/tests"
	"golang.org/x/tools/go/analysis/passes/timeformat"
	"golang.org/x/tools/go/analysis/passes/unmarshal"
	"golang.org/x/tools/go/analysis/passes/unreachable"
	"golang.org/x/tools/go/analysis/passes/unsafeptr"
	"golang.org/x/tools/go/analysis/passes/unusedresult"
	"golang.org/x/tools/go/analysis/passes/waitgroup"
	scconfig "honnef.co/go/tools/config"
	"honnef.co/go/tools/quickfix"
	"honnef.co/go/tools/simple"
	"honnef.co/go/tools/staticcheck"
	"honnef.co/go/tools/stylecheck"
)

// vet is go vet's default set of analyzers (cmd/vet of this Go release, as
// golangci-lint v2.15.0's govet copies it).
var vet = []*analysis.Analyzer{
	appends.Analyzer, asmdecl.Analyzer, assign.Analyzer, atomic.Analyzer, bools.Analyzer, buildtag.Analyzer,
	cgocall.Analyzer, composite.Analyzer, copylock.Analyzer, defers.Analyzer, directive.Analyzer,
	errorsas.Analyzer, framepointer.Analyzer, hostport.Analyzer, httpresponse.Analyzer, ifaceassert.Analyzer,
	inline.Analyzer, loopclosure.Analyzer, lostcancel.Analyzer, nilfunc.Analyzer, printf.Analyzer,
	shift.Analyzer, sigchanyzer.Analyzer, slog.Analyzer, stdmethods.Analyzer, stdversion.Analyzer,
	stringintconv.Analyzer, structtag.Analyzer, testinggoroutine.Analyzer, tests.Analyzer,
	timeformat.Analyzer, unmarshal.Analyzer, unreachable.Analyzer, unsafeptr.Analyzer, unusedresult.Analyzer,
	waitgroup.Analyzer,
}

// staticcheckOff are the staticcheck checks left out: golangci-lint's default
// exclusions (package comments, naming, receiver names, doc comment forms),
// plus QF1001 (De Morgan rewrites: a matter of taste).
var staticcheckOff = []string{"ST1000", "ST1003", "ST1016", "ST1020", "ST1021", "ST1022", "QF1001"}

// errcheckExcluded are calls whose error is not checked, beside errcheck's
// own defaults (bytes.Buffer writes and the like): output to a terminal, a
// log or an HTTP response, where a failed write has nowhere better to go.
var errcheckExcluded = []string{"fmt.Fprint", "fmt.Fprintf", "fmt.Fprintln"}

// exclusion drops one check's findings in one file.
type exclusion struct{ file, check, why string }

var exclusions = []exclusion{
	{"test/fences/redis_test.go", "SA9003", "the README's Redis snippet, copied verbatim, leaves the stale branch to the reader"},
	{"hack/lint/testdata/m/excluded.go", "SA9003", "this tool's test of exclusions"},
}

// analyzers is every check the linter runs, each under its linter's name for
// //nolint comments (group) and reported as "check: message" (built once:
// reporting changes the analyzers in place).
var analyzers = sync.OnceValue(func() []*analysis.Analyzer {
	// staticcheck's analyzers read their settings from this one (as golangci-lint sets it).
	scconfig.Analyzer.Run = func(*analysis.Pass) (any, error) {
		cfg := scconfig.DefaultConfig
		return &cfg, nil
	}
	var all []*analysis.Analyzer
	for _, a := range vet {
		all = append(all, reporting(a, "govet"))
	}
	for _, a := range slices.Concat(staticcheck.Analyzers, simple.Analyzers, stylecheck.Analyzers, quickfix.Analyzers) {
		if !slices.Contains(staticcheckOff, a.Analyzer.Name) {
			all = append(all, reporting(a.Analyzer, "staticcheck"))
		}
	}
	all = append(all,
		reporting(unusedAnalyzer, "unused"),
		reporting(errcheckAnalyzer, "errcheck"),
		reporting(ineffassign.Analyzer, "ineffassign"))
	return all
})
