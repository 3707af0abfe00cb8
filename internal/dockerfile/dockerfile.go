// Package dockerfile parses Dockerfiles with BuildKit's parser and
// instructions packages and checks them against what Airlock's template
// builder supports: one stage, FROM (a template name or scratch), RUN,
// COPY/ADD from the local context, ENV, ARG, WORKDIR, USER, LABEL, SHELL,
// CMD and ENTRYPOINT. Anything else is rejected with the line it is on.
package dockerfile

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
)

// ErrInvalid marks every error caused by the Dockerfile itself (a user
// error). Messages name the offending line.
var ErrInvalid = errors.New("invalid Dockerfile")

// supported are the instructions the builder implements (lower case, as the
// parser reports them).
var supported = map[string]bool{
	"from": true, "run": true, "copy": true, "add": true, "env": true, "arg": true,
	"workdir": true, "user": true, "label": true, "shell": true, "cmd": true,
	"entrypoint": true,
}

// File is a parsed, single-stage Dockerfile.
type File struct {
	// From is the base: a template name or "scratch" (not yet expanded
	// with ARGs; see BaseName).
	From     string
	FromLine int
	// MetaArgs are the ARGs declared before FROM.
	MetaArgs []instructions.ArgCommand
	// Commands are the stage's instructions in order.
	Commands []instructions.Command
	// Escape is the escape token (\ or `) for variable expansion.
	Escape rune
}

// Line returns the first source line of c (1-based), or 0.
func Line(c instructions.Command) int {
	if loc := c.Location(); len(loc) > 0 {
		return loc[0].Start.Line
	}
	return 0
}

func invalid(line int, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if line > 0 {
		return fmt.Errorf("%w: line %d: %s", ErrInvalid, line, msg)
	}
	return fmt.Errorf("%w: %s", ErrInvalid, msg)
}

// Parse reads a Dockerfile and validates it.
func Parse(r io.Reader) (*File, error) {
	res, err := parser.Parse(r)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	froms := 0
	for _, n := range res.AST.Children {
		kw := strings.ToLower(n.Value)
		if !supported[kw] {
			return nil, invalid(n.StartLine, "instruction %s is not supported by Airlock's template builder (supported: FROM, RUN, COPY, ADD, ENV, ARG, WORKDIR, USER, LABEL, SHELL, CMD, ENTRYPOINT)", strings.ToUpper(n.Value))
		}
		if kw == "from" {
			froms++
			if froms > 1 {
				return nil, invalid(n.StartLine, "multi-stage builds are not supported (a second FROM)")
			}
		}
		if len(n.Heredocs) > 0 {
			return nil, invalid(n.StartLine, "heredocs are not supported")
		}
	}
	stages, metaArgs, err := instructions.Parse(res.AST, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if len(stages) == 0 {
		return nil, invalid(0, "no FROM instruction")
	}
	st := stages[0]
	f := &File{From: st.BaseName, MetaArgs: metaArgs, Commands: st.Commands, Escape: res.EscapeToken}
	if len(st.Location) > 0 {
		f.FromLine = st.Location[0].Start.Line
	}
	if st.Platform != "" {
		return nil, invalid(f.FromLine, "FROM --platform is not supported")
	}
	for _, c := range st.Commands {
		if err := check(c); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// check rejects flags and forms of supported instructions that the builder
// does not implement.
func check(c instructions.Command) error {
	line := Line(c)
	switch c := c.(type) {
	case *instructions.RunCommand:
		if len(c.FlagsUsed) > 0 {
			return invalid(line, "RUN --%s is not supported", c.FlagsUsed[0])
		}
	case *instructions.CopyCommand:
		if c.From != "" {
			return invalid(line, "COPY --from is not supported (single-stage builds only)")
		}
		if c.Link || c.Parents || len(c.ExcludePatterns) > 0 {
			return invalid(line, "COPY --link, --parents and --exclude are not supported")
		}
		if len(c.SourceContents) > 0 {
			return invalid(line, "COPY heredocs are not supported")
		}
	case *instructions.AddCommand:
		if c.Link || len(c.ExcludePatterns) > 0 || c.Checksum != "" || c.KeepGitDir != nil || c.Unpack != nil {
			return invalid(line, "ADD --link, --exclude, --checksum, --keep-git-dir and --unpack are not supported")
		}
		for _, s := range c.SourcePaths {
			if strings.Contains(s, "://") || strings.HasPrefix(s, "git@") {
				return invalid(line, "ADD from a URL is not supported (only files from the build context)")
			}
		}
		if len(c.SourceContents) > 0 {
			return invalid(line, "ADD heredocs are not supported")
		}
	}
	return nil
}

// Env is an ordered set of variables usable for expansion (shell.EnvGetter).
type Env struct {
	keys []string
	vals map[string]string
}

// NewEnv returns an empty Env.
func NewEnv() *Env { return &Env{vals: map[string]string{}} }

// Get implements shell.EnvGetter.
func (e *Env) Get(k string) (string, bool) { v, ok := e.vals[k]; return v, ok }

// Keys implements shell.EnvGetter.
func (e *Env) Keys() []string { return append([]string(nil), e.keys...) }

// Set sets k to v, keeping first-set order.
func (e *Env) Set(k, v string) {
	if _, ok := e.vals[k]; !ok {
		e.keys = append(e.keys, k)
	}
	e.vals[k] = v
}

// List returns "k=v" pairs in order.
func (e *Env) List() []string {
	out := make([]string, 0, len(e.keys))
	for _, k := range e.keys {
		out = append(out, k+"="+e.vals[k])
	}
	return out
}

// Clone copies e.
func (e *Env) Clone() *Env {
	n := NewEnv()
	for _, k := range e.keys {
		n.Set(k, e.vals[k])
	}
	return n
}

// Merged returns a new Env with e's variables, then o's on top.
func (e *Env) Merged(o *Env) *Env {
	n := e.Clone()
	for _, k := range o.keys {
		n.Set(k, o.vals[k])
	}
	return n
}

var _ shell.EnvGetter = (*Env)(nil)

// Expand expands variables in the words of c (for commands that support
// it) using env.
func Expand(c instructions.Command, escape rune, env *Env) error {
	lex := shell.NewLex(escape)
	ex := func(w string) (string, error) {
		s, _, err := lex.ProcessWord(w, env)
		return s, err
	}
	if e, ok := c.(instructions.SupportsSingleWordExpansion); ok {
		if err := e.Expand(ex); err != nil {
			return invalid(Line(c), "expanding variables: %v", err)
		}
	}
	return nil
}

// ExpandWord expands one word (e.g. the FROM base) with env.
func ExpandWord(word string, escape rune, env *Env) (string, error) {
	s, _, err := shell.NewLex(escape).ProcessWord(word, env)
	return s, err
}
