// Package approval is the egress approval hook (issue 28 part 3, "stop it
// before it happens"): a sandbox can name a hook, a webhook URL or a client
// holding the approvals stream, and every new TCP destination that its rules
// do not already allow is held until the hook answers allow or deny, within
// a deadline (default 5 s; no answer denies).
//
// The package holds the hook's configuration as the API takes it
// (network.approval, Config), the answers (Decision), and the Broker that
// asks a sandbox's hooks and waits for the first answer. The hold itself is
// in the kernel (internal/network/approval_linux.go: an NFQUEUE verdict on
// the first packet of a new connection); the network manager calls
// Broker.Ask with the destination, and gives the verdict.
//
// Questions are keyed by sandbox, protocol, address and port: a SYN
// retransmitted while a question is pending joins it instead of asking
// again. Remembered answers ("remember": "sandbox" or a duration) are kept
// per sandbox by the broker (Remembered) and applied in the kernel by the
// network manager (nft set elements with timeouts), so the hook is not
// asked again for that destination.
//
// Every decision says who made it (Answer.By: the egress log's "approval by
// …" and the activity feed's "by"): the webhook, the deadline, a remembered
// answer, or a POST to …/approvals/{decisionId}, whose optional "by" names
// the client: "stream" (the default, a client of the approvals stream),
// "console" (the web console sends it) or "api".
package approval
