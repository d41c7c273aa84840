package gossip

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/serf"

	"github.com/slicerd/slicerd/internal/atomicfile"
)

// KeySizes lists the accepted gossip key lengths in bytes: AES-128, AES-192
// and AES-256, as memberlist accepts them. GenerateKey makes 32-byte keys.
var KeySizes = []int{16, 24, 32}

// maxKeyringFileSize bounds what Start reads from a keyring file: a
// keyring holds a handful of keys of 44 base64 characters each.
const maxKeyringFileSize = 64 << 10

// minKeyQueryTimeout is the shortest a keyring query waits for answers
// (serf's LAN default is 3.2 s). Serf's timeout scales with the gossip
// interval, which tests shrink to a few milliseconds; a member slowed by a
// busy host would then miss it. A query ends as soon as every member has
// answered, so the timeout only costs time when one does not.
const minKeyQueryTimeout = 3 * time.Second

// keyRelayFactor is how many other members relay each answer to a keyring
// query besides its direct UDP reply, so that one lost packet does not
// count a member as silent.
const keyRelayFactor = 2

// ParseKey decodes a base64 gossip key (standard encoding, as serf's and
// Consul's keys are written) and checks its length.
func ParseKey(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%w: gossip key is not valid base64 (%v); generate one with 'slicerd keyring generate'", ErrConfig, err)
	}
	if err := memberlist.ValidateKey(key); err != nil {
		return nil, fmt.Errorf("%w: gossip key is %d bytes; it must be 16, 24 or 32 bytes (base64 of 32 random bytes from 'slicerd keyring generate')", ErrConfig, len(key))
	}
	return key, nil
}

// EncodeKey is the base64 form ParseKey reads.
func EncodeKey(key []byte) string { return base64.StdEncoding.EncodeToString(key) }

// ReadKeyringFile reads a keyring file in serf's format: a JSON array of
// base64 keys, the primary key first. It reports fs.ErrNotExist (wrapped)
// when the file does not exist, and ErrConfig for anything unusable.
func ReadKeyringFile(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("%w: keyring file: %w; check the path and its permissions", ErrConfig, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || st.IsDir() {
		return nil, fmt.Errorf("%w: keyring file %s is a directory or cannot be read; give the path of a file", ErrConfig, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxKeyringFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("%w: keyring file %s: %w", ErrConfig, path, err)
	}
	if len(data) > maxKeyringFileSize {
		return nil, fmt.Errorf("%w: keyring file %s is larger than %d bytes; it should hold a JSON array of a few base64 keys", ErrConfig, path, maxKeyringFileSize)
	}
	var encoded []string
	if err := json.Unmarshal(data, &encoded); err != nil {
		return nil, fmt.Errorf("%w: keyring file %s is corrupt (%v); it must be a JSON array of base64 keys, primary first: restore it from another member's file or delete it and start with --gossip-key", ErrConfig, path, err)
	}
	if len(encoded) == 0 {
		return nil, fmt.Errorf("%w: keyring file %s holds no keys; delete it and start with --gossip-key", ErrConfig, path)
	}
	keys := make([][]byte, 0, len(encoded))
	for i, s := range encoded {
		k, err := ParseKey(s)
		if err != nil {
			return nil, fmt.Errorf("keyring file %s, key %d: %w", path, i+1, err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// writeKeyringFile writes keys in serf's format, readable by the owner
// only, replacing the file atomically.
func writeKeyringFile(path string, keys [][]byte) error {
	encoded := make([]string, len(keys))
	for i, k := range keys {
		encoded[i] = EncodeKey(k)
	}
	data, err := json.MarshalIndent(encoded, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, data, 0o600)
}

// validateKeys checks Config.Keys: each of an accepted length, no repeats.
func validateKeys(keys [][]byte) error {
	for i, k := range keys {
		if err := memberlist.ValidateKey(k); err != nil {
			return fmt.Errorf("%w: gossip key %d is %d bytes; it must be 16, 24 or 32 bytes", ErrConfig, i+1, len(k))
		}
		for _, prev := range keys[:i] {
			if bytes.Equal(prev, k) {
				return fmt.Errorf("%w: gossip key %d is given twice; list each key once, primary first", ErrConfig, i+1)
			}
		}
	}
	return nil
}

// loadKeyring builds the keyring a node starts with, as serf's and
// Consul's agents do: a keyring file that exists holds the keys installed
// by the last rotation and wins over Config.Keys (logged, since the keys
// given are then ignored); otherwise Config.Keys are used and, with a
// keyring file path, written to it so that a restart keeps later
// rotations. It returns nil when encryption is off.
func (c Config) loadKeyring() (ring *memberlist.Keyring, fromFile bool, err error) {
	keys := c.Keys
	if c.KeyringFile != "" {
		fileKeys, err := ReadKeyringFile(c.KeyringFile)
		switch {
		case err == nil:
			keys, fromFile = fileKeys, true
		case errors.Is(err, fs.ErrNotExist):
			if len(keys) == 0 {
				return nil, false, fmt.Errorf("%w: keyring file %s does not exist and no gossip key is given; pass --gossip-key (from 'slicerd keyring generate') or copy a member's keyring file there", ErrConfig, c.KeyringFile)
			}
			if err := writeKeyringFile(c.KeyringFile, keys); err != nil {
				return nil, false, fmt.Errorf("%w: cannot create keyring file %s: %w; check that its directory exists and is writable", ErrConfig, c.KeyringFile, err)
			}
		default:
			return nil, false, err
		}
	}
	if len(keys) == 0 {
		return nil, false, nil
	}
	ring, err = memberlist.NewKeyring(keys, keys[0])
	if err != nil {
		return nil, false, fmt.Errorf("%w: gossip keyring: %w", ErrConfig, err)
	}
	return ring, fromFile, nil
}

func slicesContainKey(keys [][]byte, k []byte) bool {
	for _, x := range keys {
		if bytes.Equal(x, k) {
			return true
		}
	}
	return false
}

// keyQueryTimeoutMult is serf's QueryTimeoutMult for a gossip interval, so
// that a keyring query waits at least minKeyQueryTimeout.
func keyQueryTimeoutMult(gossipInterval time.Duration) int {
	mult := serf.DefaultConfig().QueryTimeoutMult
	if gossipInterval <= 0 {
		return mult
	}
	return max(mult, int(math.Ceil(float64(minKeyQueryTimeout)/float64(gossipInterval))))
}

// KeyResult is the cluster's answer to a keyring operation, as serf's
// KeyManager gathers it from every member over one query.
type KeyResult struct {
	// NumNodes is how many members this node knew when it asked.
	NumNodes int
	// NumResp is how many answered before the query timed out.
	NumResp int
	// NumErr is how many answered with a failure.
	NumErr int
	// Messages maps a member's name to its error or warning.
	Messages map[string]string
	// Keys maps each installed key (base64) to how many members hold it;
	// PrimaryKeys does the same for the key each member encrypts with.
	// Both are filled by ListKeys only.
	Keys        map[string]int
	PrimaryKeys map[string]int
}

// Encrypted reports whether this node encrypts gossip.
func (n *Node) Encrypted() bool { return n.serf.EncryptionEnabled() }

// ListKeys asks every member for its installed keys. It costs one serf
// query: a broadcast and one answer from each member (relayed by two
// others), and waits until every member has answered or the query times
// out (at least 3 s, more in large clusters). When some member did not
// answer, the query is sent again, up to three times in all; the result is
// the last query's.
func (n *Node) ListKeys() (KeyResult, error) {
	return n.keyOp("list", "", func(km *serf.KeyManager) (*serf.KeyResponse, error) { return km.ListKeysWithOptions(keyOpts) })
}

// InstallKey adds key (base64) to every member's keyring, for decryption
// only until UseKey makes it the primary key. One serf query.
func (n *Node) InstallKey(key string) (KeyResult, error) {
	return n.keyOp("install", key, func(km *serf.KeyManager) (*serf.KeyResponse, error) { return km.InstallKeyWithOptions(key, keyOpts) })
}

// UseKey makes an installed key every member's primary key: the one it
// encrypts with. One serf query.
func (n *Node) UseKey(key string) (KeyResult, error) {
	return n.keyOp("use", key, func(km *serf.KeyManager) (*serf.KeyResponse, error) { return km.UseKeyWithOptions(key, keyOpts) })
}

// RemoveKey removes key from every member's keyring; a member refuses to
// remove its primary key. One serf query.
func (n *Node) RemoveKey(key string) (KeyResult, error) {
	return n.keyOp("remove", key, func(km *serf.KeyManager) (*serf.KeyResponse, error) { return km.RemoveKeyWithOptions(key, keyOpts) })
}

// keyAttempts is how many queries a keyring operation sends at most when
// some member does not answer.
const keyAttempts = 3

var keyOpts = &serf.KeyRequestOptions{RelayFactor: keyRelayFactor}

func (n *Node) keyOp(op, key string, call func(*serf.KeyManager) (*serf.KeyResponse, error)) (KeyResult, error) {
	if op != "list" {
		if _, err := ParseKey(key); err != nil {
			return KeyResult{}, fmt.Errorf("%w: %s key: %w", ErrKeyring, op, err)
		}
	}
	if n.isClosed() {
		return KeyResult{}, fmt.Errorf("gossip: %s key: %w", op, ErrClosed)
	}
	if !n.Encrypted() {
		return KeyResult{}, fmt.Errorf("%w: gossip encryption is off on %s; start every member with --gossip-key to use a keyring", ErrNotEncrypted, n.cfg.NodeName)
	}
	// Every operation is idempotent, so a query that some member did not
	// answer (its broadcast or its reply lost) is asked again of all.
	var resp *serf.KeyResponse
	var err error
	for attempt := 1; ; attempt++ {
		resp, err = call(n.serf.KeyManager())
		if err == nil || resp == nil || resp.NumResp >= resp.NumNodes || attempt == keyAttempts || n.isClosed() {
			break
		}
		n.log.Debug("gossip keyring query not answered by every member; asking again", "op", op, "nodes", resp.NumNodes, "responses", resp.NumResp, "attempt", attempt)
	}
	var res KeyResult
	if resp != nil {
		res = KeyResult{
			NumNodes: resp.NumNodes, NumResp: resp.NumResp, NumErr: resp.NumErr,
			Messages: maps.Clone(resp.Messages), Keys: maps.Clone(resp.Keys), PrimaryKeys: maps.Clone(resp.PrimaryKeys),
		}
	}
	if err != nil {
		n.log.Warn("gossip keyring operation incomplete", "op", op, "nodes", res.NumNodes, "responses", res.NumResp, "errors", res.NumErr, "err", err)
		return res, fmt.Errorf("%w: %s key: %v; see each member's message, fix or restart the failing members and repeat the command", ErrKeyring, op, err)
	}
	n.log.Info("gossip keyring operation done", "op", op, "nodes", res.NumNodes, "responses", res.NumResp)
	return res, nil
}
