package cli

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/urfave/cli/v2"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/roles"
)

// defaultKeyringFile is the keyring file's name in --data-dir when
// --gossip-keyring-file is not given.
const defaultKeyringFile = "gossip-keyring.json"

// gossipKeyFlag is the agent's --gossip-key. A new flag per App: urfave
// flags keep the value parsed from the environment.
// gossipProfileFlag is --gossip-profile, for every command that runs a
// gossip member; gossipProfile reads it.
func gossipProfileFlag() cli.Flag {
	return &cli.StringFlag{
		Name: "gossip-profile", Value: gossip.ProfileLAN, EnvVars: []string{"SLICERD_GOSSIP_PROFILE"},
		Usage: "gossip timers: lan (memberlist's LAN timers, with faster failure detection) or local (shorter probe timeouts, for loopback and tests)",
	}
}

func gossipProfile(c *cli.Context) (string, error) {
	switch p := c.String("gossip-profile"); p {
	case gossip.ProfileLAN, gossip.ProfileLocal:
		return p, nil
	default:
		return "", usageError("invalid --gossip-profile %q: use lan or local", p)
	}
}

func gossipKeyFlag() cli.Flag {
	return &cli.StringFlag{
		Name: "gossip-key", EnvVars: []string{"SLICERD_GOSSIP_KEY"},
		Usage: "encrypt gossip with this key: base64 of 16, 24 or 32 bytes ('slicerd keyring generate' prints one); " +
			"every member needs it, and a member without it cannot join. Ignored, with a warning, when the keyring file exists: " +
			"after a rotation the file holds the current keys (default: none, gossip unencrypted)",
	}
}

// gossipKeyringFileFlag is the agent's --gossip-keyring-file.
func gossipKeyringFileFlag() cli.Flag {
	return &cli.StringFlag{
		Name: "gossip-keyring-file", EnvVars: []string{"SLICERD_GOSSIP_KEYRING_FILE"},
		Usage: "file that keeps the installed gossip keys across restarts (JSON, mode 0600), rewritten by every " +
			"'slicerd keyring' change; created from --gossip-key if missing (default: " + defaultKeyringFile + " in --data-dir, " +
			"used when --gossip-key is set or that file exists)",
	}
}

// gossipKeyConfig sets cfg's gossip keys and keyring file from the flags.
func gossipKeyConfig(c *cli.Context, cfg *roles.Config) error {
	if s := c.String("gossip-key"); s != "" {
		key, err := gossip.ParseKey(strings.TrimSpace(s))
		if err != nil {
			return usageError("invalid --gossip-key: %v", err)
		}
		cfg.Gossip.Keys = [][]byte{key}
	}
	path := c.String("gossip-keyring-file")
	if c.IsSet("gossip-keyring-file") && path == "" {
		return usageError("--gossip-keyring-file is empty; give a file path, or leave the flag out for %s in --data-dir", defaultKeyringFile)
	}
	if path == "" && cfg.DataDir != "" {
		path = filepath.Join(cfg.DataDir, defaultKeyringFile)
		if _, err := os.Stat(path); err != nil {
			if len(cfg.Gossip.Keys) == 0 {
				// No key anywhere: gossip stays unencrypted. A data dir
				// that cannot hold files is the store's error to report.
				return nil
			}
			if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
				// The environment's fault, not the flags': exit 1 as for
				// any data dir that cannot be created.
				return cli.Exit(fmt.Sprintf("cannot create --data-dir %s for the gossip keyring file: %v", cfg.DataDir, err), 1)
			}
		}
	}
	if path != "" {
		if _, err := gossip.ReadKeyringFile(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return usageError("invalid --gossip-keyring-file: %v", err)
		}
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) && len(cfg.Gossip.Keys) == 0 {
			return usageError("--gossip-keyring-file %s does not exist and --gossip-key is not set: "+
				"pass --gossip-key (from 'slicerd keyring generate') to create it, or copy a member's keyring file there", path)
		}
	}
	cfg.Gossip.KeyringFile = path
	return nil
}

// keyringTimeout bounds one keyring call: the agent asked waits up to 5 s
// for each other agent's answer.
const keyringTimeout = 30 * time.Second

// KeyringCommand manages the gossip encryption keyring.
func KeyringCommand() *cli.Command {
	addr := &cli.StringFlag{
		Name: "addr", Value: "127.0.0.1:7070", EnvVars: []string{"SLICERD_ADDR"},
		Usage: "RPC address of any slicerd node of the cluster (any role); it asks every other live node over their API",
	}
	keyCmd := func(name, usage string, call func(context.Context, slicerv1connect.KeyringServiceClient, string) (*slicerv1.KeyringResult, error)) *cli.Command {
		return &cli.Command{
			Name: name, Usage: usage, ArgsUsage: "KEY", Flags: append(clientFlags(), addr),
			OnUsageError: subcommandUsageError,
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return usageError("keyring %s takes one argument, the base64 key", name)
				}
				key := c.Args().First()
				if _, err := gossip.ParseKey(key); err != nil {
					return usageError("%v", err)
				}
				ctx, cancel := context.WithTimeout(c.Context, keyringTimeout)
				defer cancel()
				client, err := keyringClient(c)
				if err != nil {
					return err
				}
				res, err := call(ctx, client, key)
				if err != nil {
					return keyringRPCError(c, err)
				}
				return printKeyringResult(c, name, res)
			},
		}
	}
	return &cli.Command{
		Name:  "keyring",
		Usage: "generate gossip encryption keys and rotate the cluster's keyring",
		Description: "Rotation, with every member started with --gossip-key and a keyring file:\n" +
			"  slicerd keyring install NEW; slicerd keyring use NEW; slicerd keyring remove OLD\n" +
			"running 'slicerd keyring list' after each step until every member shows it. The node\n" +
			"asked carries each change out and hands it to every other live node over their\n" +
			"authenticated API; tasks take it from their Assigner when they next register (within\n" +
			"30s). Every member writes it to its keyring file. Gossip never carries keyring changes,\n" +
			"so a member that has lost its certificate gets no new key and is shut out once the old\n" +
			"one is removed. Calls are for administrators only.",
		Subcommands: []*cli.Command{
			{
				Name: "generate", Usage: "print a new random 32-byte gossip key, base64",
				Action: func(c *cli.Context) error {
					if c.Args().Present() {
						return usageError("keyring generate takes no arguments")
					}
					key := make([]byte, 32)
					if _, err := rand.Read(key); err != nil {
						return cli.Exit(fmt.Sprintf("cannot read random bytes: %v", err), 1)
					}
					fmt.Fprintln(c.App.Writer, gossip.EncodeKey(key))
					return nil
				},
			},
			{
				Name: "list", Usage: "list the keys installed on the cluster's nodes, and on its tasks as they last reported", Flags: append(clientFlags(), addr),
				OnUsageError: subcommandUsageError,
				Action: func(c *cli.Context) error {
					if c.Args().Present() {
						return usageError("keyring list takes no arguments")
					}
					ctx, cancel := context.WithTimeout(c.Context, keyringTimeout)
					defer cancel()
					client, err := keyringClient(c)
					if err != nil {
						return err
					}
					resp, err := client.ListKeys(ctx, connect.NewRequest(&slicerv1.ListKeysRequest{}))
					if err != nil {
						return keyringRPCError(c, err)
					}
					printKeyCounts(c.App.Writer, resp.Msg)
					return printKeyringResult(c, "list", resp.Msg.GetResult())
				},
			},
			keyCmd("install", "install a key on every member, for decryption until 'use' makes it primary",
				func(ctx context.Context, k slicerv1connect.KeyringServiceClient, key string) (*slicerv1.KeyringResult, error) {
					r, err := k.InstallKey(ctx, connect.NewRequest(&slicerv1.InstallKeyRequest{Key: key}))
					if err != nil {
						return nil, err
					}
					return r.Msg.GetResult(), nil
				}),
			keyCmd("use", "make an installed key the one every member encrypts with",
				func(ctx context.Context, k slicerv1connect.KeyringServiceClient, key string) (*slicerv1.KeyringResult, error) {
					r, err := k.UseKey(ctx, connect.NewRequest(&slicerv1.UseKeyRequest{Key: key}))
					if err != nil {
						return nil, err
					}
					return r.Msg.GetResult(), nil
				}),
			keyCmd("remove", "remove a key from every member (not the primary key)",
				func(ctx context.Context, k slicerv1connect.KeyringServiceClient, key string) (*slicerv1.KeyringResult, error) {
					r, err := k.RemoveKey(ctx, connect.NewRequest(&slicerv1.RemoveKeyRequest{Key: key}))
					if err != nil {
						return nil, err
					}
					return r.Msg.GetResult(), nil
				}),
		},
	}
}

func keyringClient(c *cli.Context) (slicerv1connect.KeyringServiceClient, error) {
	hc, url, opts, err := rpcClient(c)
	if err != nil {
		return nil, err
	}
	return slicerv1connect.NewKeyringServiceClient(hc, url, opts...), nil
}

func keyringRPCError(c *cli.Context, err error) error {
	if msg, ok := notSlicerdAPI(c, err); ok {
		return cli.Exit(msg, 1)
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable:
		return cli.Exit(fmt.Sprintf("cannot reach slicerd at %s: %s (is it running? set --addr)", c.String("addr"), plainMessage(connectMessage(err))), 1)
	case connect.CodeUnimplemented:
		return cli.Exit(fmt.Sprintf("slicerd at %s does not serve the keyring service; upgrade it", c.String("addr")), 1)
	}
	return cli.Exit(commandPath(c)+": "+serverMessage(err), 1)
}

func printKeyCounts(w io.Writer, msg *slicerv1.ListKeysResponse) {
	keys := make([]string, 0, len(msg.GetKeys()))
	for k := range msg.GetKeys() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	total := msg.GetResult().GetNumNodes()
	fmt.Fprintf(w, "%-46s %9s %9s\n", "KEY", "INSTALLED", "PRIMARY")
	for _, k := range keys {
		fmt.Fprintf(w, "%-46s %9s %9s\n", k, fmt.Sprintf("%d/%d", msg.GetKeys()[k], total), fmt.Sprintf("%d/%d", msg.GetPrimaryKeys()[k], total))
	}
}

// printKeyringResult prints the members' answers and fails when not every
// member carried the operation out.
func printKeyringResult(c *cli.Context, op string, r *slicerv1.KeyringResult) error {
	w := c.App.Writer
	if op == "list" {
		fmt.Fprintf(w, "%s: %d members, %d answered, %d failed\n", op, r.GetNumNodes(), r.GetNumResponses(), r.GetNumErrors())
	} else {
		fmt.Fprintf(w, "%s: %s, %d answered, %d failed\n", op, count(r.GetNumNodes(), "agent"), r.GetNumResponses(), r.GetNumErrors())
		if n := r.GetNumTasksPending(); n > 0 {
			fmt.Fprintf(w, "  %s take the change when they next register with their Assigner (within 30s); run 'slicerd keyring list' until every member shows it before the next step\n", count(n, "task"))
		}
	}
	names := make([]string, 0, len(r.GetMessages()))
	for n := range r.GetMessages() {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %s: %s\n", n, r.GetMessages()[n])
	}
	if e := r.GetError(); e != "" {
		return cli.Exit(fmt.Sprintf("keyring %s incomplete: %s", op, e), 1)
	}
	return nil
}

// count is "1 agent", "2 agents".
func count(n int32, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
