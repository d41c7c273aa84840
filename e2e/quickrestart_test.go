package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slicerd/slicerd/internal/testnet"
	"github.com/slicerd/slicerd/internal/testwait"
)

// A single-node slicerd killed and started again half a second later serves
// its strong job again as soon as it is back: it rejoins the tasks it knew
// (their gossip addresses are kept in its data directory), so they are
// members of the job in its gossip at once and their lease calls are not
// refused, rather than after one of them exchanges member lists with it.
func TestStrongJobSurvivesQuickRestart(t *testing.T) {
	dataDir := t.TempDir()
	rpcAddr := testnet.FreeAddr(t)
	gossipAddr := testnet.FreeAddr(t)
	args := []string{"--data-dir", dataDir, "--rpc-addr", rpcAddr, "--gossip-addr", gossipAddr}
	node := startSlicerd(t, "node-1", args...)
	if code, out := runSlicerd(t, "job", "set", "--addr", node.rpcAddr, "--consistency", "strong", "kv"); code != 0 {
		t.Fatalf("job set --consistency strong: exit %d: %s", code, out)
	}
	var tasks []*kvTask
	for i := range 2 {
		tasks = append(tasks, startKV(t, fmt.Sprintf("kv-%d", i), node.gossipAddr, "-consistency", "strong", "-lease-ttl", "2s"))
	}
	// served reports whether every key of a small set is answered by some
	// task (a 404 for a key never written is an answer; a 421 is not).
	hc, scheme := taskClient()
	served := func() bool {
		for k := range 8 {
			ok := false
			for _, task := range tasks {
				resp, err := hc.Get(scheme + "://" + task.addr + "/kv/" + fmt.Sprint("key-", k))
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusNotFound {
					ok = true
					break
				}
			}
			if !ok {
				return false
			}
		}
		return true
	}
	testwait.Until(t, 30*time.Second, "the strong job to serve every key", served)

	node.signal(syscall.SIGKILL)
	node.wait(10 * time.Second)
	time.Sleep(500 * time.Millisecond) // the downtime under test, not a synchronisation
	back := time.Now()
	node = startSlicerd(t, "node-1", args...)
	// Past twice the tasks' lease TTL, every lease granted before the kill
	// has expired: only leases renewed through the restarted node serve.
	time.Sleep(4 * time.Second)
	testwait.Until(t, 20*time.Second, "the strong job to serve every key after the restart", served)
	refused := 0
	for _, task := range tasks {
		refused += strings.Count(task.output(), "is not an alive member of job")
	}
	t.Logf("serving every key %v after the node was back; %d calls refused as from non-members meanwhile",
		time.Since(back).Round(10*time.Millisecond), refused)
	// The node learnt its tasks by rejoining them, not by waiting for one
	// of them to exchange member lists with it.
	node.waitLine(10*time.Second, "gossip rejoined a member known before the restart")
}
