package main

import (
	"cmp"
	"fmt"
	"go/token"

	"github.com/kisielk/errcheck/errcheck"
	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/packages"
	"honnef.co/go/tools/unused"
)

// unusedAnalyzer reports what staticcheck's unused finds (U1000 only computes
// it), with unused's default options: exported identifiers count as used, a
// package's tests as users of it.
var unusedAnalyzer = &analysis.Analyzer{
	Name:     "unused",
	Doc:      "report unused constants, variables, functions and types",
	Requires: []*analysis.Analyzer{unused.Analyzer.Analyzer},
	Run: func(pass *analysis.Pass) (any, error) {
		res := pass.ResultOf[unused.Analyzer.Analyzer].(unused.Result)
		type at struct {
			file string
			line int
			name string
		}
		used := map[at]bool{}
		for _, o := range res.Used {
			used[at{o.Position.Filename, o.Position.Line, o.Name}] = true
		}
		for _, o := range res.Unused {
			if o.Kind == "type param" || used[at{o.Position.Filename, o.Position.Line, o.Name}] {
				continue
			}
			pass.Report(analysis.Diagnostic{Pos: posOf(pass, o.Position), Message: fmt.Sprintf("%s %s is unused", o.Kind, o.Name)})
		}
		return nil, nil
	},
}

// errcheckAnalyzer reports calls whose error result is dropped, but for
// errcheck's default exclusions and errcheckExcluded; an assignment to _ and
// an unchecked type assertion are not reported.
var errcheckAnalyzer = &analysis.Analyzer{
	Name: "errcheck",
	Doc:  "report calls whose returned error is not checked",
	Run: func(pass *analysis.Pass) (any, error) {
		c := errcheck.Checker{Exclusions: errcheck.Exclusions{
			BlankAssignments: true, TypeAssertions: true,
			Symbols: append(append([]string{}, errcheck.DefaultExcludedSymbols...), errcheckExcluded...),
		}}
		res := c.CheckPackage(&packages.Package{Fset: pass.Fset, Syntax: pass.Files, Types: pass.Pkg, TypesInfo: pass.TypesInfo})
		for _, e := range res.Unique().UncheckedErrors {
			msg := "error return value is not checked"
			if e.FuncName != "" {
				msg = fmt.Sprintf("error return value of `%s` is not checked", cmp.Or(e.SelectorName, e.FuncName))
			}
			pass.Report(analysis.Diagnostic{Pos: posOf(pass, e.Pos), Message: msg})
		}
		return nil, nil
	},
}

// posOf finds position p in the package's files.
func posOf(pass *analysis.Pass, p token.Position) token.Pos {
	for _, f := range pass.Files {
		tf := pass.Fset.File(f.Pos())
		if tf != nil && tf.Name() == p.Filename && p.Line >= 1 && p.Line <= tf.LineCount() {
			return tf.LineStart(p.Line) + token.Pos(max(p.Column-1, 0))
		}
	}
	return token.NoPos
}
