// Package proto holds the wire contracts of the in-sandbox agent. Run
// `go generate ./proto` after editing a .proto file (needs protoc,
// protoc-gen-go and protoc-gen-connect-go; see scripts/gen-proto.sh).
package proto

//go:generate sh ../scripts/gen-proto.sh
