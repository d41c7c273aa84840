// Package roles wires slicerd's pure parts into running services: the
// Assigner (generates, stores and publishes assignments), the Distributor
// (fans them out to subscribers, pulling from the Assigner), and the Backup
// Distributor (serves them straight from the store). An Agent runs any set
// of them in one process, with one gossip member and one RPC server that
// speaks Connect, gRPC and gRPC-Web over HTTP/2 cleartext.
//
// Data flows one way: gossip membership → Assigner → store → Distributor →
// subscribers; the Backup reads the store directly.
package roles
