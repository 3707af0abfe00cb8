package guest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// InterpreterHealth asks the code interpreter at host once (2 s at most)
// whether it is up; templates without one refuse the connection.
func (c *Client) InterpreterHealth(ctx context.Context, host string) error {
	hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(hctx, http.MethodGet, URL(host, InterpreterPort, PathHealth), nil)
	if err != nil {
		return err
	}
	res, err := c.http().Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("interpreter health: status %d", res.StatusCode)
	}
	return nil
}

// ExecuteRequest is the body of the code interpreter's POST /execute.
type ExecuteRequest struct {
	Code     string `json:"code"`
	Language string `json:"language"`
	// Silent runs without advancing the execution count.
	Silent bool `json:"silent"`
}

// Execute runs req in the code interpreter at host and returns the HTTP
// status and the NDJSON answer (its first MiB).
func (c *Client) Execute(ctx context.Context, host, token string, req ExecuteRequest) (int, []byte, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return 0, nil, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, URL(host, InterpreterPort, PathExecute), strings.NewReader(string(body)))
	if err != nil {
		return 0, nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set(HeaderAccessToken, token)
	res, err := c.http().Do(hreq)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	out, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	return res.StatusCode, out, err
}
