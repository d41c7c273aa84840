// Package roles is slicerd's agent: it wires the roles into one process,
// any of an Assigner, a Distributor and a Backup, with one gossip member,
// one store and one RPC server that speaks Connect, gRPC and gRPC-Web over
// HTTP/2. New takes a validated Config and builds without starting; Run
// runs everything under one errgroup and leaves gossip gracefully. It owns
// the agent's configuration and its flags' validation, the store and
// lease manager it opens, the certificate-backed view of gossip
// (members.go), the keyring RPCs, the metrics it registers and the web
// UI's mount. The roles themselves live beside it:
//
//   - roles/assigner: the Assigner, which generates, stores and publishes
//     assignments;
//   - roles/distributor: the Distributor (fans assignments out, pulling
//     from the Assigner) and the Backup (serves them straight from the
//     store);
//   - roles/watch: the subscription fan-out all three roles serve their
//     WatchAssignment streams from;
//   - roles/auth: who may call what, from verified certificate identities
//     and admin tokens;
//   - roles/rpc: the error table of the RPC edge and the clients for
//     calling other agents.
//
// Data flows one way: gossip membership → Assigner → store → Distributor →
// subscribers; the Backup reads the store directly.
package roles
