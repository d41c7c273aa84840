// Package identity names the peers of a slicerd cluster by what their
// verified certificates say, never by what they claim in gossip tags or
// headers.
//
// An identity is a URI in a certificate's subject alternative names, in
// the SPIFFE form under the trust domain "slicerd":
//
//	spiffe://slicerd/assigner/NODE     an agent running the Assigner role as gossip member NODE
//	spiffe://slicerd/distributor/NODE  … the Distributor role
//	spiffe://slicerd/backup/NODE       … the Backup role
//	spiffe://slicerd/task/JOB/TASK     task TASK of job JOB (TASK "*": any task of JOB)
//	spiffe://slicerd/client/JOB        a client that may watch JOB's assignment (JOB "*": every job)
//	spiffe://slicerd/admin/NAME        an operator: may change job configuration
//
// An agent that runs several roles carries one URI per role. Other URIs
// and the certificate's DNS names play no part in authorization.
package identity

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/slicerd/slicerd/assign"
)

// TrustDomain is the authority of every slicerd identity URI.
const TrustDomain = "slicerd"

// Any, as a task or job name, matches every task or job.
const Any = "*"

// Role is what an identity may do.
type Role string

// Roles.
const (
	Assigner    Role = "assigner"
	Distributor Role = "distributor"
	Backup      Role = "backup"
	Task        Role = "task"
	Client      Role = "client"
	Admin       Role = "admin"
)

// ErrInvalid reports an identity URI that is not one of slicerd's forms.
var ErrInvalid = errors.New("invalid slicerd identity")

// ID is one identity. Node is set for the agent roles, Job for task and
// client, Task for task, and Name for admin.
type ID struct {
	Role Role
	Node string
	Job  string
	Task string
	Name string
}

// IsAgent reports whether the identity is one of slicerd's own roles.
func (id ID) IsAgent() bool {
	return id.Role == Assigner || id.Role == Distributor || id.Role == Backup
}

// URI returns the identity as it appears in a certificate.
func (id ID) URI() *url.URL {
	var segs []string
	switch id.Role {
	case Assigner, Distributor, Backup:
		segs = []string{id.Node}
	case Task:
		segs = []string{id.Job, id.Task}
	case Client:
		segs = []string{id.Job}
	case Admin:
		segs = []string{id.Name}
	}
	// Path holds the segments as they are and RawPath as they are
	// written, so that a "/" or "%" inside a name stays inside its
	// segment instead of being escaped twice.
	path, raw := "/"+string(id.Role), "/"+string(id.Role)
	for _, s := range segs {
		path += "/" + s
		// "*" (Any) is legal in a path; keep it readable.
		raw += "/" + strings.ReplaceAll(url.PathEscape(s), "%2A", "*")
	}
	return &url.URL{Scheme: "spiffe", Host: TrustDomain, Path: path, RawPath: raw}
}

func (id ID) String() string { return id.URI().String() }

// Parse reads an identity URI, such as spiffe://slicerd/task/kv/kv-1.
func Parse(s string) (ID, error) {
	u, err := url.Parse(s)
	if err != nil {
		return ID{}, fmt.Errorf("%w: %q: %v", ErrInvalid, s, err)
	}
	return FromURI(u)
}

// FromURI reads an identity from a parsed URI.
func FromURI(u *url.URL) (ID, error) {
	switch {
	case u.Scheme != "spiffe" || u.Host != TrustDomain || u.Opaque != "":
		return ID{}, fmt.Errorf("%w: %q is not under spiffe://%s/", ErrInvalid, u.String(), TrustDomain)
	case u.User != nil:
		return ID{}, fmt.Errorf("%w: %q carries user information; identity URIs have none", ErrInvalid, u.String())
	case u.RawQuery != "" || u.ForceQuery:
		return ID{}, fmt.Errorf("%w: %q has a query; identity URIs have none", ErrInvalid, u.String())
	case u.Fragment != "":
		return ID{}, fmt.Errorf("%w: %q has a fragment; identity URIs have none", ErrInvalid, u.String())
	}
	raw := strings.TrimPrefix(u.EscapedPath(), "/")
	parts := strings.Split(raw, "/")
	for i, p := range parts {
		v, err := url.PathUnescape(p)
		if err != nil || v == "" {
			return ID{}, fmt.Errorf("%w: %q has an empty or badly escaped path segment", ErrInvalid, u.String())
		}
		parts[i] = v
	}
	id := ID{Role: Role(parts[0])}
	want := map[Role]int{Assigner: 2, Distributor: 2, Backup: 2, Task: 3, Client: 2, Admin: 2}[id.Role]
	if want == 0 {
		return ID{}, fmt.Errorf("%w: %q names role %q; use assigner, distributor, backup, task, client or admin", ErrInvalid, u.String(), parts[0])
	}
	if len(parts) != want {
		return ID{}, fmt.Errorf("%w: %q: role %s takes %d path segments, not %d", ErrInvalid, u.String(), id.Role, want-1, len(parts)-1)
	}
	switch id.Role {
	case Assigner, Distributor, Backup:
		id.Node = parts[1]
	case Task:
		id.Job, id.Task = parts[1], parts[2]
		if err := assign.ValidateJobName(id.Job); err != nil {
			return ID{}, fmt.Errorf("%w: %q: %v", ErrInvalid, u.String(), err)
		}
		if id.Task != Any {
			if err := assign.ValidateTaskName(id.Task); err != nil {
				return ID{}, fmt.Errorf("%w: %q: %v", ErrInvalid, u.String(), err)
			}
		}
	case Client:
		id.Job = parts[1]
		if id.Job != Any {
			if err := assign.ValidateJobName(id.Job); err != nil {
				return ID{}, fmt.Errorf("%w: %q: %v", ErrInvalid, u.String(), err)
			}
		}
	case Admin:
		id.Name = parts[1]
	}
	return id, nil
}

// FromCert returns the slicerd identities in a certificate's URI names,
// skipping URIs outside spiffe://slicerd/ (a certificate may serve other
// systems too) and reporting one that is inside it but malformed.
func FromCert(c *x509.Certificate) ([]ID, error) {
	var ids []ID
	for _, u := range c.URIs {
		if u.Scheme != "spiffe" || u.Host != TrustDomain {
			continue
		}
		id, err := FromURI(u)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// Principal is who a caller is, as far as slicerd verified it: the
// identities of its certificate, and whether it presented a valid admin
// bearer token. The zero Principal is anonymous.
type Principal struct {
	IDs []ID
	// Token is the name of the admin bearer token the caller presented,
	// "" for none.
	Token string
}

// Anonymous reports whether nothing about the caller was verified.
func (p Principal) Anonymous() bool { return len(p.IDs) == 0 && p.Token == "" }

// Admin reports whether the caller may change configuration.
func (p Principal) Admin() bool {
	return p.Token != "" || slices.ContainsFunc(p.IDs, func(id ID) bool { return id.Role == Admin })
}

// Agent reports whether the caller is a slicerd agent in role r (any agent
// role when r is empty), and as which gossip node.
func (p Principal) Agent(r Role) (node string, ok bool) {
	for _, id := range p.IDs {
		if id.IsAgent() && (r == "" || id.Role == r) {
			return id.Node, true
		}
	}
	return "", false
}

// AgentNode reports whether the caller is gossip node node in role r (any
// agent role when r is empty).
func (p Principal) AgentNode(r Role, node string) bool {
	return slices.ContainsFunc(p.IDs, func(id ID) bool {
		return id.IsAgent() && (r == "" || id.Role == r) && id.Node == node
	})
}

// TaskOf reports whether the caller may act as task task of job job.
func (p Principal) TaskOf(job, task string) bool {
	return slices.ContainsFunc(p.IDs, func(id ID) bool {
		return id.Role == Task && id.Job == job && (id.Task == task || id.Task == Any)
	})
}

// MayWatch reports whether the caller may read job's assignment: an agent,
// an admin, a task of the job or a client of it.
func (p Principal) MayWatch(job string) bool {
	if p.Admin() {
		return true
	}
	return slices.ContainsFunc(p.IDs, func(id ID) bool {
		switch id.Role {
		case Assigner, Distributor, Backup:
			return true
		case Task:
			return id.Job == job
		case Client:
			return id.Job == job || id.Job == Any
		}
		return false
	})
}

// String names the caller for logs: its identities, or its token.
func (p Principal) String() string {
	if p.Anonymous() {
		return "anonymous"
	}
	var s []string
	for _, id := range p.IDs {
		s = append(s, id.String())
	}
	if p.Token != "" {
		s = append(s, "token:"+p.Token)
	}
	return strings.Join(s, ",")
}
