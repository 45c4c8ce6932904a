package main

import (
	"go/ast"
	"slices"
	"strings"

	"golang.org/x/tools/go/analysis"
)

// reporting makes a report its findings as "name: message", except where
//   - the file is generated (ast.IsGenerated: "// Code generated ... DO NOT EDIT."),
//   - the line carries //nolint, or //nolint:group (several: //nolint:a,b),
//   - exclusions names the file and this check.
//
// It changes a in place: analyzers are package-level values built once per run.
func reporting(a *analysis.Analyzer, group string) *analysis.Analyzer {
	run := a.Run
	a.Run = func(pass *analysis.Pass) (any, error) {
		report := pass.Report
		pass.Report = func(d analysis.Diagnostic) {
			if f := fileOf(pass, d); f == nil || !silenced(pass, f, d, a.Name, group) {
				d.Message = a.Name + ": " + d.Message
				report(d)
			}
		}
		return run(pass)
	}
	return a
}

func fileOf(pass *analysis.Pass, d analysis.Diagnostic) *ast.File {
	for _, f := range pass.Files {
		if f.FileStart <= d.Pos && d.Pos <= f.FileEnd {
			return f
		}
	}
	return nil
}

func silenced(pass *analysis.Pass, f *ast.File, d analysis.Diagnostic, name, group string) bool {
	if ast.IsGenerated(f) {
		return true
	}
	pos := pass.Fset.Position(d.Pos)
	for _, e := range exclusions {
		if e.check == name && strings.HasSuffix(pos.Filename, "/"+e.file) {
			return true
		}
	}
	for _, cg := range f.Comments {
		for _, c := range cg.List {
			if pass.Fset.Position(c.Slash).Line == pos.Line && nolint(c.Text, group) {
				return true
			}
		}
	}
	return false
}

// nolint reports whether comment text ("//nolint", "//nolint:errcheck // why")
// silences the linter group.
func nolint(text, group string) bool {
	rest, ok := strings.CutPrefix(text, "//nolint")
	if !ok {
		return false
	}
	if rest == "" || rest[0] == ' ' {
		return true
	}
	if rest[0] != ':' {
		return false
	}
	names, _, _ := strings.Cut(rest[1:], " ")
	return slices.Contains(strings.Split(names, ","), group)
}
