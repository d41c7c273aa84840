package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/identity"
	"github.com/slicerd/slicerd/tlsconfig"
)

// caValidity is how long a CA made by 'tls init' is valid: longer than
// any leaf, so that certificates can be added and renewed under it.
const caValidity = 10 * 365 * 24 * time.Hour

// maxLeafDays bounds --days; a leaf cannot outlive its CA anyway.
const maxLeafDays = 10 * 365

// TLSCommand makes certificates for slicerd's TLS. It works on local files
// only (no RPC), so anyone may run it; what it guards is ca-key.pem, which
// can issue any identity. Its cost is one key pair per certificate.
func TLSCommand() *cli.Command {
	return &cli.Command{
		Name:  "tls",
		Usage: "make certificates for mutual TLS between slicerd agents, tasks, clients and operators",
		Subcommands: []*cli.Command{{
			Name:  "init",
			Usage: "create a CA and certificates carrying slicerd identities, for a test cluster or a small deployment",
			Description: "Creates DIR/ca.pem and DIR/ca-key.pem (mode 0600), or reuses them when they exist, so that\n" +
				"certificates can be added later with the same CA. Then issues, in DIR:\n" +
				"  NODE.pem, NODE-key.pem            for each --nodes entry: an agent (assigner, distributor, backup)\n" +
				"  task-JOB-TASK.pem, ...-key.pem    for each --tasks entry JOB/TASK (TASK * is written 'any')\n" +
				"  client-JOB.pem, ...-key.pem       for each --clients entry (JOB * is written 'any')\n" +
				"  admin-NAME.pem, ...-key.pem       for each --admins entry\n" +
				"An existing certificate is not overwritten without --force. Keep ca-key.pem away from the\n" +
				"cluster's machines: whoever holds it can issue any identity.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "dir", Value: "tls", EnvVars: []string{"SLICERD_TLS_INIT_DIR"},
					Usage: "directory to write the CA and certificates to (created with mode 0700 if missing)"},
				&cli.StringFlag{Name: "nodes", EnvVars: []string{"SLICERD_TLS_INIT_NODES"},
					Usage: "comma-separated gossip node names (--node-name) to issue agent certificates for"},
				&cli.StringFlag{Name: "node-roles", Value: "assigner,distributor,backup", EnvVars: []string{"SLICERD_TLS_INIT_NODE_ROLES"},
					Usage: "comma-separated roles each agent certificate names: assigner, distributor, backup"},
				&cli.StringFlag{Name: "tasks", EnvVars: []string{"SLICERD_TLS_INIT_TASKS"},
					Usage: "comma-separated JOB/TASK entries to issue task certificates for; JOB/* is any task of JOB"},
				&cli.StringFlag{Name: "clients", EnvVars: []string{"SLICERD_TLS_INIT_CLIENTS"},
					Usage: "comma-separated jobs to issue client (watch-only) certificates for; * is every job"},
				&cli.StringFlag{Name: "admins", EnvVars: []string{"SLICERD_TLS_INIT_ADMINS"},
					Usage: "comma-separated operator names to issue admin certificates for"},
				&cli.StringFlag{Name: "hosts", Value: "localhost,127.0.0.1", EnvVars: []string{"SLICERD_TLS_INIT_HOSTS"},
					Usage: "comma-separated DNS names and IP addresses put on agent certificates, so that curl and grpcurl verify them"},
				&cli.IntFlag{Name: "days", Value: 365, EnvVars: []string{"SLICERD_TLS_INIT_DAYS"},
					Usage: fmt.Sprintf("validity of the issued certificates in days (1 to %d)", maxLeafDays)},
				&cli.BoolFlag{Name: "force", EnvVars: []string{"SLICERD_TLS_INIT_FORCE"},
					Usage: "overwrite existing certificates and keys (never the CA)"},
			},
			OnUsageError: func(_ *cli.Context, err error, _ bool) error {
				return usageError("%v (see 'slicerd tls init --help')", err)
			},
			Action: func(c *cli.Context) error { return tlsInit(c) },
		}},
	}
}

// issue is one certificate to write.
type issue struct {
	name string // file name without .pem
	what string // for the output
	leaf tlsconfig.Leaf
	node bool
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// fileSafe checks that name can be part of a file name in --dir.
func fileSafe(flag, name string) error {
	if strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") || strings.ContainsFunc(name, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return usageError("invalid --%s entry %q: it becomes part of a file name; use no '/', '\\', control characters or leading '.'", flag, name)
	}
	return nil
}

// tlsPlan turns the flags into the certificates to issue.
func tlsPlan(c *cli.Context) ([]issue, error) {
	days := c.Int("days")
	if days < 1 || days > maxLeafDays {
		return nil, usageError("invalid --days %d: use 1 to %d", days, maxLeafDays)
	}
	validity := time.Duration(days) * 24 * time.Hour

	var roles []identity.Role
	for _, r := range splitList(c.String("node-roles")) {
		role := identity.Role(r)
		if role != identity.Assigner && role != identity.Distributor && role != identity.Backup {
			return nil, usageError("invalid --node-roles entry %q: use assigner, distributor or backup, comma-separated", r)
		}
		if !slices.Contains(roles, role) {
			roles = append(roles, role)
		}
	}
	if len(roles) == 0 {
		return nil, usageError("--node-roles is empty: name at least one of assigner, distributor, backup")
	}

	var dns []string
	var ips []net.IP
	for _, h := range splitList(c.String("hosts")) {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
			continue
		}
		if strings.ContainsAny(h, "/:@ ") {
			return nil, usageError("invalid --hosts entry %q: use a DNS name or an IP address", h)
		}
		dns = append(dns, h)
	}

	var plan []issue
	for _, node := range splitList(c.String("nodes")) {
		if err := fileSafe("nodes", node); err != nil {
			return nil, err
		}
		var ids []identity.ID
		for _, r := range roles {
			ids = append(ids, identity.ID{Role: r, Node: node})
		}
		plan = append(plan, issue{name: node, what: "agent " + node, node: true,
			leaf: tlsconfig.Leaf{CommonName: node, IDs: ids, DNSNames: dns, IPs: ips, Validity: validity}})
	}
	for _, spec := range splitList(c.String("tasks")) {
		job, task, ok := strings.Cut(spec, "/")
		if !ok {
			return nil, usageError("invalid --tasks entry %q: use JOB/TASK, or JOB/* for any task of JOB", spec)
		}
		if err := assign.ValidateJobName(job); err != nil {
			return nil, usageError("invalid --tasks entry %q: %v", spec, err)
		}
		if task != identity.Any {
			if err := assign.ValidateTaskName(task); err != nil {
				return nil, usageError("invalid --tasks entry %q: %v (or use * for any task)", spec, err)
			}
		}
		id := identity.ID{Role: identity.Task, Job: job, Task: task}
		plan = append(plan, issue{name: "task-" + job + "-" + anyName(task), what: "task " + spec,
			leaf: tlsconfig.Leaf{CommonName: "task " + spec, IDs: []identity.ID{id}, Validity: validity}})
	}
	for _, job := range splitList(c.String("clients")) {
		if job != identity.Any {
			if err := assign.ValidateJobName(job); err != nil {
				return nil, usageError("invalid --clients entry %q: %v (or use * for every job)", job, err)
			}
		}
		id := identity.ID{Role: identity.Client, Job: job}
		plan = append(plan, issue{name: "client-" + anyName(job), what: "client of " + job,
			leaf: tlsconfig.Leaf{CommonName: "client " + job, IDs: []identity.ID{id}, Validity: validity}})
	}
	for _, name := range splitList(c.String("admins")) {
		if err := fileSafe("admins", name); err != nil {
			return nil, err
		}
		id := identity.ID{Role: identity.Admin, Name: name}
		plan = append(plan, issue{name: "admin-" + name, what: "admin " + name,
			leaf: tlsconfig.Leaf{CommonName: "admin " + name, IDs: []identity.ID{id}, Validity: validity}})
	}
	seen := map[string]string{}
	for _, is := range plan {
		if other, ok := seen[is.name]; ok {
			return nil, usageError("%s and %s would both be written to %s.pem; drop one", other, is.what, is.name)
		}
		seen[is.name] = is.what
		if is.name == "ca" {
			return nil, usageError("%s would be written to ca.pem, the CA's file; choose another name", is.what)
		}
	}
	return plan, nil
}

func anyName(s string) string {
	if s == identity.Any {
		return "any"
	}
	return s
}

func tlsInit(c *cli.Context) error {
	if c.Args().Present() {
		return usageError("unexpected argument %q; tls init takes flags only (see 'slicerd tls init --help')", c.Args().First())
	}
	plan, err := tlsPlan(c)
	if err != nil {
		return err
	}
	dir := c.String("dir")
	if dir == "" {
		return usageError("--dir is empty: name the directory to write certificates to")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return cli.Exit(fmt.Sprintf("cannot create --dir %s: %v; choose a directory you can write to", dir, err), 1)
	}

	// Refuse before writing anything, so that a refused run changes nothing.
	if !c.Bool("force") {
		var exist []string
		for _, is := range plan {
			for _, f := range []string{is.name + ".pem", is.name + "-key.pem"} {
				if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
					exist = append(exist, filepath.Join(dir, f))
				}
			}
		}
		if len(exist) > 0 {
			return cli.Exit(fmt.Sprintf("not overwriting %s; remove them or pass --force to issue them again", strings.Join(exist, ", ")), 1)
		}
	}

	caFile, caKey := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	ca, created, err := openCA(caFile, caKey)
	if err != nil {
		return err
	}
	out := c.App.Writer
	if created {
		fmt.Fprintf(out, "created CA %s (key %s, mode 0600, valid until %s)\n", caFile, caKey, ca.Cert.NotAfter.Format(time.DateOnly))
	} else {
		fmt.Fprintf(out, "using the existing CA %s (key %s)\n", caFile, caKey)
	}
	for _, is := range plan {
		if time.Now().Add(is.leaf.Validity).After(ca.Cert.NotAfter) {
			return cli.Exit(fmt.Sprintf("--days %d would outlive the CA in %s (valid until %s); give fewer days", c.Int("days"), caFile, ca.Cert.NotAfter.Format(time.DateOnly)), 1)
		}
	}

	for _, is := range plan {
		f, err := ca.IssueFiles(dir, is.name, caFile, is.leaf)
		if err != nil {
			return cli.Exit(fmt.Sprintf("cannot write the certificate of %s in %s: %v", is.what, dir, err), 1)
		}
		// WriteFile keeps the mode of a file it overwrites (--force).
		if err := os.Chmod(f.Key, 0o600); err != nil {
			return cli.Exit(fmt.Sprintf("cannot restrict %s to mode 0600: %v", f.Key, err), 1)
		}
		var names []string
		for _, id := range is.leaf.IDs {
			names = append(names, id.String())
		}
		fmt.Fprintf(out, "wrote %s (%s): %s\n", f.Cert, is.what, strings.Join(names, " "))
		if is.node {
			fmt.Fprintf(out, "  slicerd --node-name %s --tls-cert %s --tls-key %s --tls-ca %s\n", is.leaf.CommonName, f.Cert, f.Key, f.CA)
		} else {
			fmt.Fprintf(out, "  certificate %s, key %s, CA %s\n", f.Cert, f.Key, f.CA)
		}
	}
	if len(plan) == 0 {
		fmt.Fprintln(out, "no certificates requested; add --nodes, --tasks, --clients or --admins to issue some")
	}
	return nil
}

// openCA loads the CA in caFile and caKey, or creates it when neither
// exists. It reports whether it created one.
func openCA(caFile, caKey string) (*tlsconfig.CA, bool, error) {
	_, certErr := os.Stat(caFile)
	_, keyErr := os.Stat(caKey)
	switch {
	case certErr == nil && keyErr == nil:
		ca, err := tlsconfig.LoadCA(caFile, caKey)
		if err != nil {
			return nil, false, cli.Exit(fmt.Sprintf("cannot use the existing CA: %v; fix or remove %s and %s", err, caFile, caKey), 1)
		}
		return ca, false, nil
	case certErr == nil || keyErr == nil:
		return nil, false, cli.Exit(fmt.Sprintf("found only one of %s and %s; restore the other, or remove both to create a new CA (certificates it issued will no longer verify)", caFile, caKey), 1)
	case !errors.Is(certErr, fs.ErrNotExist) || !errors.Is(keyErr, fs.ErrNotExist):
		return nil, false, cli.Exit(fmt.Sprintf("cannot check for an existing CA: %v, %v", certErr, keyErr), 1)
	}
	ca, err := tlsconfig.NewCA("slicerd CA", caValidity)
	if err != nil {
		return nil, false, cli.Exit(fmt.Sprintf("cannot create a CA: %v", err), 1)
	}
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		return nil, false, cli.Exit(fmt.Sprintf("cannot encode the CA key: %v", err), 1)
	}
	// The key first and exclusively: a CA certificate without its key
	// would block the next run.
	if err := writeNew(caKey, keyPEM, 0o600); err != nil {
		return nil, false, err
	}
	if err := writeNew(caFile, ca.CertPEM, 0o644); err != nil {
		return nil, false, err
	}
	return ca, true, nil
}

func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return cli.Exit(fmt.Sprintf("cannot create %s: %v; choose a --dir you can write to", path, err), 1)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return cli.Exit(fmt.Sprintf("cannot write %s: %v", path, err), 1)
	}
	if err := f.Close(); err != nil {
		return cli.Exit(fmt.Sprintf("cannot write %s: %v", path, err), 1)
	}
	return nil
}
