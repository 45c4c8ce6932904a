package testsupport

import (
	"strconv"
	"strings"
)

// CodeBlock is one fenced code block (``` or ~~~) of a Markdown document, as
// extracted by MarkdownCodeBlocks for the README snippet tests.
type CodeBlock struct {
	// Lang is the first word of the info string ("console", "go", "sh", ...; "" if none).
	Lang string
	// Code is the text between the fences, each line ending in a newline.
	Code string
	// Line is the 1-based line of the opening fence.
	Line int
	// Headings are the headings the block is under, outermost first
	// (without the leading #s).
	Headings []string
}

// Under reports whether the block is inside a section with this heading, at any level.
func (b CodeBlock) Under(heading string) bool {
	for _, h := range b.Headings {
		if h == heading {
			return true
		}
	}
	return false
}

// Where names the block for failure messages: its line, language and innermost heading.
func (b CodeBlock) Where() string {
	h := ""
	if len(b.Headings) > 0 {
		h = ` in "` + b.Headings[len(b.Headings)-1] + `"`
	}
	return "```" + b.Lang + " block at line " + strconv.Itoa(b.Line) + h
}

// MarkdownCodeBlocks returns the fenced code blocks of md in order. A fence
// is three or more backticks or tildes after at most three spaces; the block
// ends at a fence of the same character at least as long. Headings are ATX
// headings (#, ##, ...) outside code blocks. An unclosed block runs to the end.
func MarkdownCodeBlocks(md string) []CodeBlock {
	var (
		out      []CodeBlock
		headings []string // index = level-1
		cur      *CodeBlock
		fence    string
		body     strings.Builder
	)
	lines := strings.Split(md, "\n")
	for i, line := range lines {
		trimmed := strings.TrimLeft(line, " ")
		indent := len(line) - len(trimmed)
		if cur != nil {
			if indent <= 3 && strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]+" \t") == "" {
				cur.Code = body.String()
				out = append(out, *cur)
				cur = nil
				continue
			}
			body.WriteString(line)
			body.WriteString("\n")
			continue
		}
		if indent <= 3 {
			if f := fenceOf(trimmed); f != "" {
				info := strings.Fields(strings.TrimPrefix(trimmed, f))
				lang := ""
				if len(info) > 0 {
					lang = info[0]
				}
				cur = &CodeBlock{Lang: lang, Line: i + 1, Headings: nonEmpty(headings)}
				fence = f
				body.Reset()
				continue
			}
			if level, text, ok := atxHeading(trimmed); ok {
				for len(headings) < level {
					headings = append(headings, "")
				}
				headings = headings[:level]
				headings[level-1] = text
			}
		}
	}
	if cur != nil {
		cur.Code = body.String()
		out = append(out, *cur)
	}
	return out
}

// fenceOf returns the opening fence (``` or ~~~, maybe longer) that line starts with, or "".
func fenceOf(line string) string {
	for _, c := range []byte{'`', '~'} {
		n := 0
		for n < len(line) && line[n] == c {
			n++
		}
		if n >= 3 {
			if c == '`' && strings.ContainsRune(line[n:], '`') {
				return "" // an inline code span, not a fence
			}
			return line[:n]
		}
	}
	return ""
}

// atxHeading parses "## Title" (optional closing #s).
func atxHeading(line string) (int, string, bool) {
	n := 0
	for n < len(line) && line[n] == '#' {
		n++
	}
	if n == 0 || n > 6 || (n < len(line) && line[n] != ' ' && line[n] != '\t') {
		return 0, "", false
	}
	text := strings.TrimSpace(line[n:])
	text = strings.TrimSpace(strings.TrimRight(text, "#"))
	return n, text, true
}

func nonEmpty(ss []string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// ConsoleCommand is one "$ command" of a console code block and the output
// shown under it.
type ConsoleCommand struct {
	// Command is the command line without the "$ " prompt; continuation
	// lines (after a trailing backslash) are included, joined by newlines.
	Command string
	// Output are the non-empty lines shown after the command, up to the next prompt.
	Output []string
	// Line is the 1-based line of the prompt within the block's code.
	Line int
}

// ConsoleCommands splits a console block into its commands. Lines before the
// first prompt are ignored.
func ConsoleCommands(code string) []ConsoleCommand {
	var out []ConsoleCommand
	lines := strings.Split(strings.TrimRight(code, "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if !strings.HasPrefix(line, "$ ") {
			if len(out) > 0 && strings.TrimSpace(line) != "" {
				out[len(out)-1].Output = append(out[len(out)-1].Output, line)
			}
			continue
		}
		cmd := ConsoleCommand{Command: strings.TrimPrefix(line, "$ "), Line: i + 1}
		for strings.HasSuffix(strings.TrimRight(lines[i], " "), `\`) && i+1 < len(lines) {
			i++
			cmd.Command += "\n" + lines[i]
		}
		out = append(out, cmd)
	}
	return out
}
