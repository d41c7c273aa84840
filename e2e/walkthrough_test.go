package e2e

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/slicerd/slicerd/identity"
	"github.com/slicerd/slicerd/internal/testnet"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/storage/etcdstore/etcdtest"
)

// TestSecurityWalkthrough runs docs/security.md's "Secure multi-host
// setup" as written, on one machine, so that the page cannot drift from
// what slicerd does. The commands come from the page's code blocks, in
// order; what a reader does by hand (copying files to each host, starting
// the systemd unit) the test does, and it maps what cannot be had on one
// machine:
//
//   - the hosts 10.0.0.1–3 and their ports become free ports on 127.0.0.1
//     (the certificates keep the names the page gives them);
//   - /etc/slicerd/ of node nN becomes a directory of its own, and the
//     node gets a data directory as the systemd unit gives it one;
//   - the store becomes an etcd server on loopback without TLS (etcd over
//     TLS has its own section and test: TestEtcdOverTLS);
//   - ~ becomes a directory of the test.
func TestSecurityWalkthrough(t *testing.T) {
	if secure {
		t.Skip("the walkthrough sets up its own TLS: it runs in the plain pass")
	}
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("the walkthrough's step 2 uses openssl, which is not on PATH (Debian: apt-get install openssl)")
	}
	page, err := os.ReadFile("../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(page)
	start := strings.Index(section, "## Secure multi-host setup")
	end := strings.Index(section, "### Rotating certificates and keys")
	if start < 0 || end < start {
		t.Fatal("docs/security.md has no 'Secure multi-host setup' section before 'Rotating certificates and keys'")
	}
	section = section[start:end]
	blocks := codeBlocks(section)
	if len(blocks) != 5 {
		t.Fatalf("the walkthrough has %d code blocks, the test follows 5 (tls init, keys, node env, task, operate):\n%q", len(blocks), blocks)
	}

	w := t.TempDir()
	etcd := etcdtest.Start(t)
	// Every host:port of the page gets a free loopback port.
	ports := map[string]string{}
	hostPort := regexp.MustCompile(`10\.0\.0\.\d:\d+`)
	for _, hp := range hostPort.FindAllString(section, -1) {
		_, port, _ := strings.Cut(hp, ":")
		for n := 1; n <= 3; n++ { // the page shows n1; n2 and n3 have theirs
			if hp := fmt.Sprintf("10.0.0.%d:%s", n, port); ports[hp] == "" {
				ports[hp] = testnet.FreeAddr(t)
			}
		}
	}
	mapAddrs := func(s string) string {
		return hostPort.ReplaceAllStringFunc(s, func(hp string) string { return ports[hp] })
	}
	binDir := filepath.Dir(bin.slicerd)
	env := []string{"PATH=" + binDir + ":" + os.Getenv("PATH"), "HOME=" + filepath.Join(w, "home"), "SLICERD_LOG_FORMAT=json"}
	if err := os.MkdirAll(filepath.Join(w, "home"), 0o700); err != nil {
		t.Fatal(err)
	}
	bash := func(step, script string) string {
		t.Helper()
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
		cmd.Dir, cmd.Env = w, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("step %s failed: %v\nscript:\n%s\noutput:\n%s", step, err, script, out)
		}
		return string(out)
	}

	// 1. Certificates, and 2. the gossip key and admin token.
	bash("1 (certificates)", blocks[0])
	for _, f := range []string{"ca.pem", "ca-key.pem", "n1.pem", "n1-key.pem", "task-kv-kv-0.pem", "task-kv-kv-0-key.pem", "client-kv.pem", "admin-ops.pem"} {
		if _, err := os.Stat(filepath.Join(w, "pki", f)); err != nil {
			t.Errorf("step 1 names %s, which tls init did not write: %v", f, err)
		}
	}
	bash("2 (gossip key and token)", blocks[1])
	gossipKey := strings.TrimSpace(readFile(t, filepath.Join(w, "pki", "gossip.key")))
	tokens := readFile(t, filepath.Join(w, "pki", "tokens"))
	opsSecret := strings.Fields(tokens)[1]

	// 3. Each node: its files in its own /etc/slicerd, its env file.
	var nodes []*proc
	for n := 1; n <= 3; n++ {
		name := fmt.Sprintf("n%d", n)
		etc := filepath.Join(w, name, "etc")
		if err := os.MkdirAll(etc, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"ca.pem", name + ".pem", name + "-key.pem", "tokens"} {
			copyFile(t, filepath.Join(w, "pki", f), filepath.Join(etc, f))
		}
		nodeEnv := append([]string(nil), env...)
		nodeEnv = append(nodeEnv, "SLICERD_DATA_DIR="+filepath.Join(w, name, "data"))
		for _, line := range strings.Split(blocks[2], "\n") {
			key, val, ok := strings.Cut(strings.TrimSpace(line), "=")
			if !ok {
				continue
			}
			switch key {
			case "SLICERD_STORE":
				val = "etcd://" + etcd.Endpoint() + "/slicerd/"
			case "SLICERD_ETCD_CA", "SLICERD_ETCD_CERT", "SLICERD_ETCD_KEY":
				continue // etcd without TLS here
			case "SLICERD_GOSSIP_KEY":
				val = gossipKey
			case "SLICERD_JOIN":
			default:
				// The page shows n1; nN has its own name and addresses.
				val = strings.ReplaceAll(val, "n1", name)
				val = strings.ReplaceAll(val, "10.0.0.1:", fmt.Sprintf("10.0.0.%d:", n))
			}
			val = strings.ReplaceAll(mapAddrs(val), "/etc/slicerd/", etc+"/")
			nodeEnv = append(nodeEnv, key+"="+val)
		}
		p := startEnv(t, name, bin.slicerd, nodeEnv)
		p.waitLine(30*time.Second, `"msg":"slicerd started"`)
		nodes = append(nodes, p)
	}

	// 4. The task: its files copied to its host, then the page's commands.
	kvEtc := filepath.Join(w, "kv", "etc")
	if err := os.MkdirAll(kvEtc, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ca.pem", "task-kv-kv-0.pem", "task-kv-kv-0-key.pem", "gossip.key"} {
		copyFile(t, filepath.Join(w, "pki", f), filepath.Join(kvEtc, f))
	}
	if err := os.MkdirAll(filepath.Join(w, "kv", "lib"), 0o700); err != nil {
		t.Fatal(err)
	}
	task := blocks[3]
	task = strings.ReplaceAll(task, "/etc/kv/", kvEtc+"/")
	task = strings.ReplaceAll(task, "/var/lib/kv/", filepath.Join(w, "kv", "lib")+"/")
	task = mapAddrs(task)
	// The last command runs in the foreground: exec it, so that the test
	// owns the process.
	if i := strings.LastIndex(task, "kvserver "); i >= 0 {
		task = task[:i] + "exec " + task[i:]
	}
	kv := startEnv(t, "kv-0", "bash", env, "-euo", "pipefail", "-c", "cd "+w+"\n"+task)
	kv.waitLine(30*time.Second, "kvserver task=kv-0")
	// The task serves TLS with its own certificate, and no plain text.
	conn, err := tls.Dial("tcp", ports["10.0.0.1:8080"], &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatalf("the task does not serve TLS at its address: %v", err)
	}
	ids, err := identity.FromCert(conn.ConnectionState().PeerCertificates[0])
	conn.Close()
	if err != nil || !(identity.Principal{IDs: ids}).TaskOf("kv", "kv-0") {
		t.Errorf("the task's certificate names %v (%v), not task kv/kv-0", ids, err)
	}
	if resp, err := http.Get("http://" + ports["10.0.0.1:8080"] + "/kv/a"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusNotFound {
			t.Errorf("the task answered a plain-text GET: HTTP %d", resp.StatusCode)
		}
	}

	// 5. Operate: the CLI as an admin, by certificate and by token.
	op := blocks[4]
	op = strings.ReplaceAll(op, "<the ops secret>", opsSecret)
	op = mapAddrs(op)
	out := bash("5 (operate)", op)
	t.Logf("step 5 printed:\n%s", out)
	var got string
	testwait.Until(t, 30*time.Second, "job kv to have redundancy 2 and its task", func() bool {
		cmd := exec.Command(bin.slicerd, "job", "get", "kv", "--addr", ports["10.0.0.1:7070"],
			"--tls-ca", filepath.Join(w, "pki", "ca.pem"), "--tls-cert", filepath.Join(w, "pki", "admin-ops.pem"),
			"--tls-key", filepath.Join(w, "pki", "admin-ops-key.pem"))
		cmd.Env = env
		b, err := cmd.CombinedOutput()
		got = string(b)
		return err == nil && strings.Contains(got, "kv-0") && regexp.MustCompile(`redundancy\s+2`).MatchString(got)
	})
	for _, p := range nodes {
		if strings.Contains(p.output(), `"level":"ERROR"`) {
			t.Errorf("%s logged an error:\n%s", p.name, p.output())
		}
	}
}

// codeBlocks returns the contents of the fenced code blocks of a Markdown
// text, in order, with the fences' indentation removed.
func codeBlocks(md string) []string {
	var blocks []string
	var cur []string
	in := false
	indent := ""
	for _, line := range strings.Split(md, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if strings.HasPrefix(trimmed, "```") {
			if in {
				blocks = append(blocks, strings.Join(cur, "\n"))
				cur, in = nil, false
			} else {
				in, indent = true, line[:len(line)-len(trimmed)]
			}
			continue
		}
		if in {
			cur = append(cur, strings.TrimPrefix(line, indent))
		}
	}
	return blocks
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	if err := os.WriteFile(to, []byte(readFile(t, from)), 0o600); err != nil {
		t.Fatal(err)
	}
}
