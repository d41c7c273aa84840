package etcdstore

import "errors"

// Sentinel errors of the connection to etcd; the storage package's
// sentinels cover the rest. Callers match them with errors.Is; the wrapped
// message names the endpoint and the setting to fix.
var (
	// ErrTLS: a TLS file cannot be read or parsed, or a TLS handshake
	// with etcd failed: etcd's certificate is not signed by the
	// CA given, or etcd refused or missed the client certificate.
	ErrTLS = errors.New("etcdstore: TLS with etcd failed")
	// ErrAuth: etcd refused the credentials (user name and password, or
	// the client certificate's user), or the user may not use the prefix.
	ErrAuth = errors.New("etcdstore: etcd refused the credentials")
)
