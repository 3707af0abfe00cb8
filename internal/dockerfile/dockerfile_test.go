package dockerfile

import (
	"errors"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
)

func TestParseSupported(t *testing.T) {
	src := `ARG BASE=base
FROM ${BASE}
ENV A=1 B="two words"
ARG V=3
LABEL org.example=x
SHELL ["/bin/bash", "-c"]
RUN echo $A
RUN ["echo", "exec form"]
COPY --chown=user:user a* /dst/
ADD b.txt /b.txt
WORKDIR /w
USER user
CMD ["python3", "-m", "http.server"]
ENTRYPOINT ["/bin/sh", "-c"]
`
	f, err := Parse(strings.NewReader(src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if f.From != "${BASE}" || f.FromLine != 2 {
		t.Errorf("From = %q line %d, want ${BASE} line 2", f.From, f.FromLine)
	}
	if got, err := ExpandWord(f.From, f.Escape, func() *Env { e := NewEnv(); e.Set("BASE", "base"); return e }()); err != nil || got != "base" {
		t.Errorf("ExpandWord = %q, %v", got, err)
	}
	if len(f.Commands) != 12 {
		t.Fatalf("got %d commands, want 12", len(f.Commands))
	}
	run := f.Commands[4].(*instructions.RunCommand)
	if !run.PrependShell || Line(run) != 7 {
		t.Errorf("RUN shell form: PrependShell=%v line=%d", run.PrependShell, Line(run))
	}
	exec := f.Commands[5].(*instructions.RunCommand)
	if exec.PrependShell || strings.Join(exec.CmdLine, "|") != "echo|exec form" {
		t.Errorf("RUN exec form: %+v", exec.ShellDependantCmdLine)
	}
	cp := f.Commands[6].(*instructions.CopyCommand)
	if cp.Chown != "user:user" || cp.DestPath != "/dst/" {
		t.Errorf("COPY: chown %q dest %q", cp.Chown, cp.DestPath)
	}
	env := NewEnv()
	env.Set("A", "x")
	e := f.Commands[0].(*instructions.EnvCommand)
	if err := Expand(e, f.Escape, env); err != nil || e.Env[1].Value != "two words" {
		t.Errorf("ENV expansion: %+v %v", e.Env, err)
	}
}

func TestParseRejects(t *testing.T) {
	for _, tc := range []struct {
		src, want string
	}{
		{"FROM base\nRUN true\nEXPOSE 80\n", "line 3: instruction EXPOSE is not supported"},
		{"FROM base\nHEALTHCHECK CMD true\n", "line 2: instruction HEALTHCHECK is not supported"},
		{"FROM base\nFROM base\n", "line 2: multi-stage builds are not supported"},
		{"FROM base\nRUN --mount=type=cache,target=/x true\n", "line 2: RUN --mount is not supported"},
		{"FROM base\nCOPY --from=x /a /b\n", "line 2: COPY --from is not supported"},
		{"FROM base\nADD https://example.com/x /x\n", "line 2: ADD from a URL is not supported"},
		{"FROM --platform=linux/arm64 base\n", "line 1: FROM --platform"},
		{"RUN true\n", "invalid Dockerfile"},
		{"FROM base\nBOGUS x\n", "line 2: instruction BOGUS is not supported"},
	} {
		_, err := Parse(strings.NewReader(tc.src))
		if err == nil {
			t.Errorf("Parse(%q) succeeded, want error containing %q", tc.src, tc.want)
			continue
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q) = %v, not ErrInvalid", tc.src, err)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %q, want it to contain %q", tc.src, err, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add("FROM base\nRUN echo hi\nCOPY a b\n")
	f.Add("FROM scratch\nENV A=$B\n")
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = Parse(strings.NewReader(s))
	})
}
