// Package webhooks delivers lifecycle events (internal/events) to the
// webhooks registered through /events/webhooks, as E2B does: a POST of the
// event's JSON with the headers e2b-webhook-id, e2b-delivery-id (new for
// every attempt), e2b-signature-version: v1 and e2b-signature, the
// URL-safe unpadded base64 of SHA-256(secret + body). A failed attempt
// (transport error or a non-2xx answer) is retried 10 s later, up to 4
// attempts in all ("up to 3 times, 10 seconds apart").
//
// Pending deliveries are store rows written with their event
// (store.EventStore): the Deliverer claims due rows under a lease
// (ClaimDeliveries), sends, and records the attempt with the outcome
// (FinishDelivery). A daemon killed between the claim and the record
// leaves the row, which is due again when the lease runs out: the event
// goes out again under the same event id (receivers deduplicate on it).
// Several deliverers (the api instances of a cluster) share the rows:
// PostgreSQL's FOR UPDATE SKIP LOCKED gives each row to one of them.
//
// A webhook's URL may not point at a private, loopback or link-local
// address, the sandbox pool or the operator's deny list (the ranges
// network.Config.Denies refuses for the daemon's own outbound connections,
// as template builds' FROM) unless the operator allows private URLs
// (--webhook-allow-private). The check runs at registration on what the
// name resolves to, and again on the address every delivery connects to
// (net.Dialer.Control), so a name that resolves elsewhere later (DNS
// rebinding) is refused too. The api tier of a cluster links no network
// code: it gets the operator's list as prefixes (Config.DenyOut,
// DenyOutExcept) and applies it to IPv4, refusing private IPv6.
//
// Signing secrets are sealed at rest (Secrets, secrets.go): the stored
// value is "sealed:v1:" and the standard base64 of a secretbox value
// under --secrets-key-file with the webhook id as associated data; the
// API seals on create and update, the Deliverer opens at each attempt. A
// value without the prefix is a legacy clear secret (stored before
// sealing, no migration needed): it still signs, the next update of the
// webhook seals it, and every daemon seals the remaining ones at start
// (SealLegacy, a compare-and-swap per row). A secret that does not open
// (another key) fails the attempt without contacting the receiver. Every
// daemon that writes or delivers webhooks needs the same key: in a
// cluster, the same --secrets-key-file on every node and api instance.
package webhooks
