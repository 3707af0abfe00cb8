module github.com/airlock-sandbox/airlock/sdk/go/examples/quickstart

go 1.26.8

require (
	connectrpc.com/connect v1.21.1
	github.com/airlock-sandbox/airlock v0.0.0
)

require google.golang.org/protobuf v1.36.12 // indirect

// This checkout instead of a published version: the example builds against
// the SDK as it is here. A program of your own names a release instead.
replace github.com/airlock-sandbox/airlock => ../../../..
