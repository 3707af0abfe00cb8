package guest

import (
	"net/http"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/sdk/go/airlock/proto/filesystempb/filesystempbconnect"
)

// Filesystem returns a Filesystem service client (JSON codec) of the agent
// at host, authenticated with token and acting as user ("" = the agent's
// default user). Like Process, it never follows a redirect and caps each
// message.
func (c *Client) Filesystem(host, token, user string) filesystempbconnect.FilesystemClient {
	base := c.http().Transport
	if base == nil {
		base = http.DefaultTransport
	}
	hc := &http.Client{Transport: &authTransport{base: base, user: user, token: token}, CheckRedirect: NoRedirect}
	return filesystempbconnect.NewFilesystemClient(hc, c.url(host, ""), connect.WithProtoJSON(), connect.WithReadMaxBytes(MaxProcessMessage))
}
