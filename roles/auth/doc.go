// Package auth decides who may call what on a slicerd agent's RPC server.
//
// It owns the verified identity of every request (Caller, from the
// client certificate's slicerd identities and an admin bearer token),
// the table of which identities may call each procedure (before the
// request is read), the per-message rules that follow (a task reports
// load only for itself, a job is read only by those who may watch it,
// configuration is changed only by admins), the admin tokens and their
// file, and the forwarding headers by which one Assigner passes on the
// caller it verified: they are believed only from a caller whose
// certificate names it an Assigner, and stripped from everyone else.
//
// It must not decide anything about jobs or assignments: the roles read
// CallerFrom and apply their own rules (a task registers only itself).
package auth
