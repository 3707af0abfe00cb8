package airlock

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// Template is one entry of GET /templates (E2B's Template schema plus
// Airlock's sizeBytes).
type Template struct {
	TemplateID  string    `json:"templateID"`
	BuildID     string    `json:"buildID,omitempty"`
	Aliases     []string  `json:"aliases,omitempty"`
	CPUCount    int       `json:"cpuCount,omitempty"`
	MemoryMB    int       `json:"memoryMB,omitempty"`
	DiskSizeMB  int       `json:"diskSizeMB,omitempty"`
	Public      bool      `json:"public,omitempty"`
	BuildStatus string    `json:"buildStatus,omitempty"`
	EnvdVersion string    `json:"envdVersion,omitempty"`
	CreatedAt   time.Time `json:"createdAt"`
	UpdatedAt   time.Time `json:"updatedAt"`
	SizeBytes   int64     `json:"sizeBytes,omitempty"`
	// Tags are the template's tags ("default" for the bare name).
	Tags []string `json:"tags,omitempty"`
}

// ListTemplates returns the daemon's templates (GET /templates).
func (c *Client) ListTemplates(ctx context.Context) ([]Template, error) {
	var out []Template
	if _, err := c.doJSON(ctx, http.MethodGet, "/templates", nil, nil, &out); err != nil {
		return nil, fmt.Errorf("listing templates: %w", err)
	}
	return out, nil
}

// BuildError is a build failure reported by the daemon inside the stream.
type BuildError struct{ Message string }

func (e *BuildError) Error() string { return "template build failed: " + e.Message }

// maxBuildLine bounds one NDJSON line of the build stream.
const maxBuildLine = 1 << 20

// BuildTemplate asks the daemon to build template name
// (POST /airlock/v1/templates/{name}/build[?force=true]) and reads the NDJSON
// stream: progress lines are passed to onProgress (may be nil) as they
// arrive; the final {"done":true,"template":{…}} line yields the template and
// an {"error":"…"} line yields a *BuildError.
func (c *Client) BuildTemplate(ctx context.Context, name string, force bool, onProgress func(Progress)) (*Template, error) {
	q := url.Values{}
	if force {
		q.Set("force", "true")
	}
	return c.build(ctx, name, q, "", nil, onProgress)
}

// build posts to template name's build endpoint (with the body of type
// contentType, if any) and reads the NDJSON stream it answers.
func (c *Client) build(ctx context.Context, name string, q url.Values, contentType string, body io.Reader, onProgress func(Progress)) (*Template, error) {
	req, err := c.newRequest(ctx, http.MethodPost, "/airlock/v1/templates/"+url.PathEscape(name)+"/build", q, body)
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("building template %s: %w", name, c.transportError(err))
	}
	defer resp.Body.Close()
	if err := checkResponse(resp); err != nil {
		return nil, fmt.Errorf("building template %s: %w", name, err)
	}
	return readBuildStream(resp.Body, name, onProgress)
}

// readBuildStream reads the NDJSON build stream of template name.
func readBuildStream(body io.Reader, name string, onProgress func(Progress)) (*Template, error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), maxBuildLine)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		// "done" is a number on progress lines and true on the final line.
		var msg struct {
			Phase    string          `json:"phase"`
			Message  string          `json:"message"`
			Done     json.RawMessage `json:"done"`
			Total    int64           `json:"total"`
			Template *Template       `json:"template"`
			Error    *string         `json:"error"`
		}
		if err := json.Unmarshal(line, &msg); err != nil {
			return nil, fmt.Errorf("building template %s: bad progress line %q: %w", name, line, err)
		}
		if msg.Error != nil {
			return nil, &BuildError{Message: *msg.Error}
		}
		if string(msg.Done) == "true" || msg.Template != nil {
			if msg.Template == nil {
				return nil, fmt.Errorf("building template %s: final line has no template", name)
			}
			return msg.Template, nil
		}
		p := Progress{Phase: msg.Phase, Message: msg.Message, Total: msg.Total}
		if len(msg.Done) > 0 && string(msg.Done) != "false" && string(msg.Done) != "null" {
			if err := json.Unmarshal(msg.Done, &p.Done); err != nil {
				return nil, fmt.Errorf("building template %s: bad done value %s: %w", name, msg.Done, err)
			}
		}
		if onProgress != nil {
			onProgress(p)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("building template %s: reading stream: %w", name, err)
	}
	return nil, errors.New("building template " + name + ": stream ended before the build finished")
}
