package framework

import "github.com/elector-sidecar/elector-sidecar/internal/testsupport"

// The condition waits and the README code-block reader live in the root
// module's internal/testsupport, so the root module's unit tests use them
// without depending on this (test) module; the harnesses use them from here.

// PollInterval is a good default interval for local conditions (a local API,
// a log buffer, the apiserver on this machine).
const PollInterval = testsupport.PollInterval

// Poll, Eventually and Consistently: see internal/testsupport.
var (
	Poll         = testsupport.Poll
	Eventually   = testsupport.Eventually
	Consistently = testsupport.Consistently
)

// CodeBlock and ConsoleCommand: see internal/testsupport.
type (
	CodeBlock      = testsupport.CodeBlock
	ConsoleCommand = testsupport.ConsoleCommand
)

// MarkdownCodeBlocks and ConsoleCommands: see internal/testsupport.
var (
	MarkdownCodeBlocks = testsupport.MarkdownCodeBlocks
	ConsoleCommands    = testsupport.ConsoleCommands
)
