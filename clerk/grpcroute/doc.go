// Package grpcroute routes a gRPC-Go channel's calls by key to the tasks of
// a job sharded by slicerd, inside the RPC stack: the caller dials
// slicer:///JOB, attaches a key to each call, and every call goes to a
// live task that the job's assignment gives the key, with no lookup or
// address in the caller's code. It is the Clerk of the Slicer design
// (paper §2.3) as gRPC's name resolver and load-balancing policy, in the
// shape of gRPC's auto-sharding policy (gRFC A119).
//
// # Pieces
//
//   - A resolver for the scheme "slicer" (NewBuilder; pass it to
//     grpc.NewClient with grpc.WithResolvers). For target slicer:///JOB it
//     runs a clerk.Clerk for JOB, and on every assignment the Clerk
//     installs it reports the job's tasks as the channel's endpoints, with
//     the lookup table attached, and selects the policy below through the
//     service config.
//   - A load-balancing policy, "slicer_key_routing" (registered when the
//     package is imported). It keeps one pick_first child per task
//     (gRPC's endpointsharding), so the channel holds a connection to
//     every task of the job, and picks per call.
//   - The key: WithKey or WithKeyString on the call's context (the fast
//     path: the slice key is computed once, when it is attached), or, when
//     the context has none, the request header named by
//     Config.KeyHeader ("slicer-key" unless set; a "-bin" header carries
//     raw bytes).
//   - TaskCredentials, for clusters with TLS: each connection accepts only
//     the certificate of the task the assignment places at that address.
//
// # Picking
//
// A call's key is hashed to its slice key (assign.HashKey), the slice is
// found by binary search in the held assignment, and the call goes to one
// of the slice's tasks whose connection is ready, drawn at random, which
// spreads a replicated slice's calls over its replicas. When none of the
// slice's tasks is ready but one is still connecting (a task the
// assignment just added), the call waits for it, as gRPC calls wait for a
// connection. When every one of them has failed, or the task has no
// address, the call goes to a random ready task of the job instead (the
// fallback of A119): it reaches a live process that can answer, redirect
// or refuse, rather than failing in the client. A call without a key goes
// to a random ready task. Before the first assignment calls wait, as on
// any channel whose resolver has not answered yet; with Config.Fallback
// they go to those addresses instead.
//
// Failures of slicerd only delay updates: while no Distributor or Backup
// answers, the Clerk keeps the assignment it holds (and Config.Clerk's
// CacheFile keeps one across restarts of the client), so the channel keeps
// routing. A task that dies fails its connection at once, so its keys fall
// back to the live tasks until the assignment without it arrives.
//
// A pick costs a context lookup, a binary search and a random draw: no
// lock and no allocation (BenchmarkPick). A key in a header costs gRPC's
// copy of the outgoing metadata as well.
//
// Usage:
//
//	cfg := clerk.DefaultConfig()
//	cfg.Addrs = []string{"slicerd-1:7070", "slicerd-2:7070"}
//	b, err := grpcroute.NewBuilder(grpcroute.Config{Clerk: cfg})
//	if err != nil { ... }
//	conn, err := grpc.NewClient("slicer:///kv", grpc.WithResolvers(b),
//		grpc.WithTransportCredentials(insecure.NewCredentials()))
//	if err != nil { ... }
//	defer conn.Close()
//	conn.Connect() // start watching the assignment now, not at the first call
//	reply, err := kvpb.NewKVClient(conn).Get(grpcroute.WithKeyString(ctx, key), req)
//
// A119's sharding-service protocol, once published, would replace the
// resolver's Clerk as the source of assignments; the policy's picker only
// needs a table from keys to endpoints and stays as it is.
package grpcroute
