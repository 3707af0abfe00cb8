package approval

import "github.com/airlock-sandbox/airlock/internal/webhooks"

// Sign is the E2B webhook signature (internal/webhooks.Sign) of body.
func Sign(secret string, body []byte) string { return webhooks.Sign(secret, body) }
