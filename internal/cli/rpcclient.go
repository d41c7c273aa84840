package cli

import (
	"errors"
	"net/http"
	"os"
	"strings"

	"connectrpc.com/connect"
	"github.com/urfave/cli/v2"

	"github.com/slicerd/slicerd/api"
	"github.com/slicerd/slicerd/tlsconfig"
)

// clientFlags are the security flags of every command that calls an agent.
// Their environment variables are the CLI's own (SLICERD_CLIENT_*): an
// agent's SLICERD_TLS_CERT and SLICERD_TOKEN_FILE mean the node's server
// certificate and its file of token secrets, so a shell that sourced the
// agent's environment must not hand them to the CLI.
func clientFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{
			Name: "tls-ca", EnvVars: []string{"SLICERD_CLIENT_TLS_CA"},
			Usage: "CA certificate (PEM) to verify the agent by; turns TLS on. The agent must present a slicerd agent identity",
		},
		&cli.StringFlag{
			Name: "tls-cert", EnvVars: []string{"SLICERD_CLIENT_TLS_CERT"},
			Usage: "client certificate (PEM) to present, e.g. an admin or client one from 'slicerd tls init'",
		},
		&cli.StringFlag{
			Name: "tls-key", EnvVars: []string{"SLICERD_CLIENT_TLS_KEY"},
			Usage: "private key (PEM) of --tls-cert",
		},
		&cli.StringFlag{
			Name: "token-file", EnvVars: []string{"SLICERD_CLIENT_TOKEN_FILE"},
			Usage: "file holding an admin bearer token to send (one of the agent's --token-file secrets); needs TLS",
		},
	}
}

// rpcClient returns the HTTP client, base URL and Connect options for
// calling the agent at --addr with the command's security flags.
func rpcClient(c *cli.Context) (*http.Client, string, []connect.ClientOption, error) {
	addr := c.String("addr")
	opts := []connect.ClientOption{connect.WithGRPC()}
	files := tlsconfig.Files{CA: c.String("tls-ca"), Cert: c.String("tls-cert"), Key: c.String("tls-key")}
	if !files.Enabled() {
		if c.String("token-file") != "" {
			return nil, "", nil, usageError("--token-file needs TLS (--tls-ca): a bearer token sent in clear can be read off the network")
		}
		return api.NewH2CClient(), api.URL(addr, false), opts, nil
	}
	if err := files.Validate("tls-", false); err != nil {
		return nil, "", nil, usageError("%v", err)
	}
	src, err := tlsconfig.Load(files, nil)
	if err != nil {
		return nil, "", nil, usageError("%v", err)
	}
	if path := c.String("token-file"); path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, "", nil, usageError("--token-file: %v", err)
		}
		token := strings.TrimSpace(string(b))
		if token == "" || strings.ContainsAny(token, " \t\r\n") {
			return nil, "", nil, usageError("--token-file %s must hold one token on one line", path)
		}
		opts = append(opts, connect.WithInterceptors(api.BearerToken(token)))
	}
	return api.NewHTTPClient(src.ClientConfig(tlsconfig.WantAgent())), api.URL(addr, true), opts, nil
}

// agentSecurityFlags are the agent's security flags.
func agentSecurityFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{
			Name: "tls-cert", EnvVars: []string{"SLICERD_TLS_CERT"},
			Usage: "certificate (PEM) the RPC port presents, naming this node in each of its roles (slicerd tls init makes one); " +
				"with --tls-key and --tls-ca it turns on TLS and authentication. Reloaded when the file changes",
		},
		&cli.StringFlag{
			Name: "tls-key", EnvVars: []string{"SLICERD_TLS_KEY"},
			Usage: "private key (PEM) of --tls-cert",
		},
		&cli.StringFlag{
			Name: "tls-ca", EnvVars: []string{"SLICERD_TLS_CA"},
			Usage: "CA certificate (PEM) that callers' and other agents' certificates must chain to",
		},
		&cli.StringFlag{
			Name: "token-file", EnvVars: []string{"SLICERD_TOKEN_FILE"},
			Usage: "file of admin bearer tokens, one \"NAME SECRET\" per line, for the CLI's writes (needs TLS); keep it mode 0600",
		},
		&cli.BoolFlag{
			Name: "insecure", EnvVars: []string{"SLICERD_INSECURE"},
			Usage: "allow cleartext RPC and gossip on addresses other than loopback, trusting everyone who can reach them",
		},
	}
}

// sentinelPackages are the packages whose sentinel errors start the
// messages of slicerd's RPC errors: "assign: invalid job config: ...".
var sentinelPackages = map[string]bool{"api": true, "assign": true, "auth": true, "gossip": true, "lease": true, "roles": true, "rpc": true, "storage": true, "watch": true}

// plainMessage is msg, an error message of slicerd's packages, without what
// only slicerd's developers need: the package prefix ("assign: "), and an
// "invalid ..." sentinel's text where a detail that says more follows it.
func plainMessage(msg string) string {
	if pkg, rest, ok := strings.Cut(msg, ": "); ok && sentinelPackages[pkg] {
		msg = rest
		if sentinel, detail, ok := strings.Cut(rest, ": "); ok && strings.HasPrefix(sentinel, "invalid ") && !strings.ContainsAny(sentinel, `"'`) {
			msg = detail
		}
	}
	return msg
}

// serverMessage is what a failed call's error says to the user: the
// server's message, plain, with the Connect code in words where it tells
// more than the message ("permission denied: ..."), and not where the
// message says it all (invalid_argument, not_found, failed_precondition).
func serverMessage(err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err.Error()
	}
	msg := plainMessage(ce.Message())
	switch ce.Code() {
	case connect.CodeInvalidArgument, connect.CodeNotFound, connect.CodeFailedPrecondition, connect.CodeAlreadyExists, connect.CodeOutOfRange:
		return msg
	}
	return strings.ReplaceAll(ce.Code().String(), "_", " ") + ": " + msg
}

// connectMessage is err's message without its Connect code.
func connectMessage(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}
