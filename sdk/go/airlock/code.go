package airlock

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Result is one rich output of an execution (E2B's Result shape).
type Result struct {
	IsMainResult bool           `json:"is_main_result"`
	Text         string         `json:"text,omitempty"`
	HTML         string         `json:"html,omitempty"`
	Markdown     string         `json:"markdown,omitempty"`
	SVG          string         `json:"svg,omitempty"`
	PNG          string         `json:"png,omitempty"` // base64
	JPEG         string         `json:"jpeg,omitempty"`
	PDF          string         `json:"pdf,omitempty"`
	LaTeX        string         `json:"latex,omitempty"`
	JavaScript   string         `json:"javascript,omitempty"`
	JSON         map[string]any `json:"json,omitempty"`
	Data         map[string]any `json:"data,omitempty"`
	Chart        map[string]any `json:"chart,omitempty"`
	Extra        map[string]any `json:"extra,omitempty"`
}

// Formats lists the result's non-empty representations.
func (r Result) Formats() []string {
	var f []string
	for name, v := range map[string]string{"text": r.Text, "html": r.HTML, "markdown": r.Markdown, "svg": r.SVG,
		"png": r.PNG, "jpeg": r.JPEG, "pdf": r.PDF, "latex": r.LaTeX, "javascript": r.JavaScript} {
		if v != "" {
			f = append(f, name)
		}
	}
	return f
}

// ExecutionError is an error raised by the executed code.
type ExecutionError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

func (e *ExecutionError) Error() string { return e.Name + ": " + e.Value }

// Logs are the streamed outputs of an execution.
type Logs struct {
	Stdout []string
	Stderr []string
}

// Execution is the outcome of RunCode.
type Execution struct {
	Results        []Result
	Logs           Logs
	Error          *ExecutionError
	ExecutionCount int
}

// Text is the main result's text, as in E2B's SDKs.
func (e *Execution) Text() string {
	for _, r := range e.Results {
		if r.IsMainResult {
			return r.Text
		}
	}
	return ""
}

// RunOption tunes RunCode.
type RunOption func(*runConfig)

type runConfig struct {
	language  string
	contextID string
	envs      map[string]string
	onStdout  func(string)
	onStderr  func(string)
	onResult  func(Result)
	onError   func(*ExecutionError)
}

// WithLanguage picks the language's default context (python, javascript, typescript, bash).
func WithLanguage(l string) RunOption { return func(c *runConfig) { c.language = l } }

// InContext runs in a context created with CreateCodeContext.
func InContext(id string) RunOption { return func(c *runConfig) { c.contextID = id } }

// WithEnvVars sets env vars for this execution only.
func WithEnvVars(env map[string]string) RunOption { return func(c *runConfig) { c.envs = env } }

// OnStdout streams stdout chunks as they are produced.
func OnStdout(f func(string)) RunOption { return func(c *runConfig) { c.onStdout = f } }

// OnStderr streams stderr chunks as they are produced.
func OnStderr(f func(string)) RunOption { return func(c *runConfig) { c.onStderr = f } }

// OnResult is called for every rich result.
func OnResult(f func(Result)) RunOption { return func(c *runConfig) { c.onResult = f } }

// OnError is called when the code raises.
func OnError(f func(*ExecutionError)) RunOption { return func(c *runConfig) { c.onError = f } }

// RunCode executes code in the sandbox's interpreter and returns when it is
// done. Cancelling ctx interrupts the execution.
func (s *Sandbox) RunCode(ctx context.Context, code string, opts ...RunOption) (*Execution, error) {
	var cfg runConfig
	for _, o := range opts {
		o(&cfg)
	}
	body := map[string]any{"code": code}
	if cfg.language != "" {
		body["language"] = cfg.language
	}
	if cfg.contextID != "" {
		body["context_id"] = cfg.contextID
	}
	if cfg.envs != nil {
		body["env_vars"] = cfg.envs
	}
	b, _ := json.Marshal(body)
	req, err := s.request(ctx, InterpreterPort, http.MethodPost, "/execute", bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	resp, err := s.c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("running code: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, checkResponse(resp)
	}
	ex := &Execution{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 512<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var head struct {
			Type           string `json:"type"`
			Text           string `json:"text"`
			ExecutionCount int    `json:"execution_count"`
		}
		if err := json.Unmarshal(line, &head); err != nil {
			return ex, fmt.Errorf("decoding output line: %w", err)
		}
		switch head.Type {
		case "stdout":
			ex.Logs.Stdout = append(ex.Logs.Stdout, head.Text)
			if cfg.onStdout != nil {
				cfg.onStdout(head.Text)
			}
		case "stderr":
			ex.Logs.Stderr = append(ex.Logs.Stderr, head.Text)
			if cfg.onStderr != nil {
				cfg.onStderr(head.Text)
			}
		case "result":
			var r Result
			if err := json.Unmarshal(line, &r); err != nil {
				return ex, fmt.Errorf("decoding result: %w", err)
			}
			ex.Results = append(ex.Results, r)
			if cfg.onResult != nil {
				cfg.onResult(r)
			}
		case "error":
			var e ExecutionError
			if err := json.Unmarshal(line, &e); err != nil {
				return ex, fmt.Errorf("decoding error: %w", err)
			}
			ex.Error = &e
			if cfg.onError != nil {
				cfg.onError(&e)
			}
		case "number_of_executions":
			ex.ExecutionCount = head.ExecutionCount
		}
	}
	if err := sc.Err(); err != nil {
		return ex, fmt.Errorf("reading execution stream: %w", err)
	}
	return ex, nil
}

// CodeContext is an isolated interpreter state.
type CodeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

func (s *Sandbox) interp(ctx context.Context, method, path string, in, out any) error {
	var body *bytes.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	var req *http.Request
	var err error
	if body != nil {
		req, err = s.request(ctx, InterpreterPort, method, path, body)
	} else {
		req, err = s.request(ctx, InterpreterPort, method, path, nil)
	}
	if err != nil {
		return err
	}
	resp, err := s.c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return checkResponse(resp)
	}
	if out != nil {
		return json.NewDecoder(resp.Body).Decode(out)
	}
	return nil
}

// CreateCodeContext creates a new context (language "" = python).
func (s *Sandbox) CreateCodeContext(ctx context.Context, language, cwd string) (*CodeContext, error) {
	in := map[string]any{}
	if language != "" {
		in["language"] = strings.ToLower(language)
	}
	if cwd != "" {
		in["cwd"] = cwd
	}
	var c CodeContext
	if err := s.interp(ctx, http.MethodPost, "/contexts", in, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

// ListCodeContexts lists the sandbox's contexts.
func (s *Sandbox) ListCodeContexts(ctx context.Context) ([]CodeContext, error) {
	var out []CodeContext
	err := s.interp(ctx, http.MethodGet, "/contexts", nil, &out)
	return out, err
}

// RestartCodeContext clears a context's state.
func (s *Sandbox) RestartCodeContext(ctx context.Context, id string) error {
	return s.interp(ctx, http.MethodPost, "/contexts/"+url.PathEscape(id)+"/restart", nil, nil)
}

// RemoveCodeContext deletes a context.
func (s *Sandbox) RemoveCodeContext(ctx context.Context, id string) error {
	return s.interp(ctx, http.MethodDelete, "/contexts/"+url.PathEscape(id), nil, nil)
}
