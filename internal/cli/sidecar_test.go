package cli

import (
	"strings"
	"testing"
)

// Bad sidecar settings are refused before anything starts, with exit 2 and
// a message that names the setting and what to give instead.
func TestSidecarRefusesBadSettings(t *testing.T) {
	base := []string{"slicerd", "sidecar", "--job", "kv", "--task", "kv-0", "--app-addr", "127.0.0.1:8080", "--join", "127.0.0.1:7946"}
	with := func(extra ...string) []string { return append(append([]string(nil), base...), extra...) }
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no job", []string{"slicerd", "sidecar", "--task", "kv-0", "--app-addr", "127.0.0.1:8080", "--join", "127.0.0.1:7946"}, "--job is required"},
		{"bad job", []string{"slicerd", "sidecar", "--job", "k v", "--task", "kv-0", "--app-addr", "127.0.0.1:8080", "--join", "127.0.0.1:7946"}, "invalid --job"},
		{"bad task", []string{"slicerd", "sidecar", "--job", "kv", "--task", "a/b", "--app-addr", "127.0.0.1:8080", "--join", "127.0.0.1:7946"}, "invalid --task"},
		{"app address without a port", []string{"slicerd", "sidecar", "--job", "kv", "--task", "kv-0", "--app-addr", "127.0.0.1", "--join", "127.0.0.1:7946"}, "invalid --app-addr"},
		{"no join", []string{"slicerd", "sidecar", "--job", "kv", "--task", "kv-0", "--app-addr", "127.0.0.1:8080"}, "no --join"},
		{"health URL not http", with("--health-url", "ftp://127.0.0.1/x"), "invalid --health-url"},
		{"no failures", with("--health-failures", "0"), "invalid --health-failures"},
		{"zero interval", with("--health-interval", "0s"), "must be positive"},
		{"negative drain timeout", with("--drain-timeout", "-1s"), "invalid --drain-timeout"},
		{"bad gossip key", with("--gossip-key", "short"), "invalid --gossip-key"},
		{"certificate without its key", with("--tls-cert", "/nonexistent.pem"), "tls-key"},
		{"an argument", with("extra"), "flags only"},
		{"empty local API socket", with("--local-api-socket", ""), "--local-api-socket is empty"},
		{"bad gossip profile", with("--gossip-profile", "wan"), "invalid --gossip-profile"},
		{"zero load window", with("--load-window", "0s"), "invalid --load-window"},
		{"bad consistency", with("--consistency", "eventual"), "invalid --consistency"},
		{"zero lease TTL", with("--consistency", "strong", "--lease-ttl", "0s"), "invalid --lease-ttl"},
		{"lease TTL over the most", with("--lease-ttl", "2h"), "invalid --lease-ttl"},
		{"zero release wait", with("--release-wait", "0s"), "invalid --release-wait"},
		{"state socket without a handoff address", with("--app-state-socket", "/run/app/state.sock"), "go together"},
		{"handoff address without a state socket", with("--handoff-addr", "127.0.0.1:7000"), "go together"},
		{"handoff on every interface", with("--app-state-socket", "/s", "--handoff-addr", "0.0.0.0:7000", "--local-api-socket", "/l"), "invalid --handoff-addr"},
		{"handoff address without a port", with("--app-state-socket", "/s", "--handoff-addr", "10.0.0.5", "--local-api-socket", "/l"), "invalid --handoff-addr"},
		{"handoff without the local API", with("--app-state-socket", "/s", "--handoff-addr", "127.0.0.1:0"), "needs --local-api-socket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut strings.Builder
			code := run(tc.args, &out, &errOut)
			if code != 2 || !strings.Contains(errOut.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want exit 2 and %q", code, errOut.String(), tc.want)
			}
		})
	}
}
