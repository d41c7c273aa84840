package e2e

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/slicerd/slicerd/api"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/identity"
	"github.com/slicerd/slicerd/tlsconfig"
)

// With SLICERD_E2E_SECURE=1 every test runs its cluster with the
// documented secure settings: each slicerd node with a certificate naming
// it in every role, an admin token file and the gossip key, each kvserver
// task with a certificate naming its task and the gossip key, the CLI
// with an admin certificate, and the test's own clients with a client
// certificate. scripts/test.sh runs the
// package a second time this way.
var secure = os.Getenv("SLICERD_E2E_SECURE") == "1"

// pki issues the secure mode's certificates into a directory made by
// TestMain.
var pki struct {
	mu     sync.Mutex
	dir    string
	ca     *tlsconfig.CA
	caFile string
	issued map[string]tlsconfig.Files
}

// testAdminToken is the admin token secure nodes accept.
const testAdminToken = "e2e-admin-token-0123456789abcdef0123"

// testGossipKey is the gossip key of secure clusters (32 bytes, base64).
const testGossipKey = "c2xpY2VyZC1lMmUtZ29zc2lwLWtleS0zMi1ieXRlcyE="

func setupPKI(dir string) error {
	ca, err := tlsconfig.NewCA("slicerd e2e CA", 24*time.Hour)
	if err != nil {
		return err
	}
	pki.dir, pki.ca, pki.caFile, pki.issued = dir, ca, filepath.Join(dir, "ca.pem"), map[string]tlsconfig.Files{}
	if err := os.WriteFile(pki.caFile, ca.CertPEM, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tokens"), []byte("e2e "+testAdminToken+"\n"), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "admin-token"), []byte(testAdminToken+"\n"), 0o600)
}

// issue returns the files of a certificate for ids, issuing it once per
// name.
func issue(name string, ids ...identity.ID) tlsconfig.Files {
	pki.mu.Lock()
	defer pki.mu.Unlock()
	if f, ok := pki.issued[name]; ok {
		return f
	}
	f, err := pki.ca.IssueFiles(pki.dir, name, pki.caFile, tlsconfig.Leaf{
		CommonName: name, IDs: ids, DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Validity: 24 * time.Hour,
	})
	if err != nil {
		panic(fmt.Sprintf("issuing %s: %v", name, err))
	}
	pki.issued[name] = f
	return f
}

// secureEnv returns the environment that puts a process started with
// args into secure mode: a slicerd agent, a slicerd CLI command or a
// kvserver task.
func secureEnv(path string, args []string) []string {
	if !secure {
		return nil
	}
	flagValue := func(name string) string {
		for i, a := range args {
			if (a == name || a == "-"+name) && i+1 < len(args) {
				return args[i+1]
			}
		}
		return ""
	}
	switch {
	case path == bin.kvserver:
		job, task := flagValue("-job"), flagValue("-task")
		if job == "" {
			job = "kv"
		}
		f := issue("task-"+job+"-"+task, identity.ID{Role: identity.Task, Job: job, Task: task})
		return []string{"KVSERVER_TLS_CERT=" + f.Cert, "KVSERVER_TLS_KEY=" + f.Key, "KVSERVER_TLS_CA=" + f.CA,
			"SLICERD_GOSSIP_KEY=" + testGossipKey}
	case len(args) > 0 && args[0] == "sidecar":
		// A task: its own certificate and the gossip key.
		job, task := flagValue("--job"), flagValue("--task")
		f := issue("task-"+job+"-"+task, identity.ID{Role: identity.Task, Job: job, Task: task})
		return []string{"SLICERD_TLS_CERT=" + f.Cert, "SLICERD_TLS_KEY=" + f.Key, "SLICERD_TLS_CA=" + f.CA,
			"SLICERD_GOSSIP_KEY=" + testGossipKey}
	case len(args) > 0 && !strings.HasPrefix(args[0], "-"):
		// A command: the CLI as an admin.
		f := issue("admin", identity.ID{Role: identity.Admin, Name: "e2e"})
		return []string{"SLICERD_CLIENT_TLS_CERT=" + f.Cert, "SLICERD_CLIENT_TLS_KEY=" + f.Key, "SLICERD_CLIENT_TLS_CA=" + f.CA}
	default:
		node := flagValue("--node-name")
		if node == "" {
			node, _ = os.Hostname() // slicerd's default node name
		}
		f := issue("node-"+node, identity.ID{Role: identity.Assigner, Node: node},
			identity.ID{Role: identity.Distributor, Node: node}, identity.ID{Role: identity.Backup, Node: node})
		env := []string{"SLICERD_TLS_CERT=" + f.Cert, "SLICERD_TLS_KEY=" + f.Key, "SLICERD_TLS_CA=" + f.CA,
			"SLICERD_TOKEN_FILE=" + filepath.Join(pki.dir, "tokens"), "SLICERD_GOSSIP_KEY=" + testGossipKey}
		if flagValue("--data-dir") == "" {
			// Keep a node without a data dir from writing its keyring
			// file into the working directory.
			env = append(env, "SLICERD_GOSSIP_KEYRING_FILE="+filepath.Join(pki.dir, "keyring-"+node+".json"))
		}
		return env
	}
}

// clientSource is the TLS source of the test's own clients of job (an
// admin's for job ""), nil outside secure mode.
func clientSource(job string) *tlsconfig.Source {
	if !secure {
		return nil
	}
	f := issue("admin", identity.ID{Role: identity.Admin, Name: "e2e"})
	if job != "" {
		f = issue("client-"+job, identity.ID{Role: identity.Client, Job: job})
	}
	src, err := tlsconfig.Load(f, nil)
	if err != nil {
		panic(err)
	}
	return src
}

// secureClerk puts a Clerk configuration into secure mode.
func secureClerk(cfg clerk.Config) clerk.Config {
	cfg.TLS = clientSource(cfg.Job)
	return cfg
}

// rpcClient returns an HTTP client and base URL for calling the node at
// addr as a client of job (an admin for ""): TLS with a client
// certificate in secure mode.
func rpcClient(job string) (*http.Client, func(addr string) string) {
	if src := clientSource(job); src != nil {
		return api.NewHTTPClient(src.ClientConfig(tlsconfig.WantAgent())), func(addr string) string { return api.URL(addr, true) }
	}
	return api.NewH2CClient(), api.RPCURL
}

// taskClient returns an HTTP client and the URL scheme for calling a kv
// task directly, as a client of job kv: HTTPS with a client certificate in
// secure mode, where kvserver serves only TLS (any task of kv is accepted;
// kvcache.Client checks the very task).
func taskClient() (*http.Client, string) {
	src := clientSource("kv")
	if src == nil {
		return http.DefaultClient, "http"
	}
	cfg := src.ClientConfig(func(ids []identity.ID) error {
		for _, id := range ids {
			if id.Role == identity.Task && id.Job == "kv" {
				return nil
			}
		}
		return fmt.Errorf("certificate names no task of kv (has %v)", ids)
	})
	cfg.NextProtos = []string{"http/1.1"}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}, "https"
}
