package gossip

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"

	"github.com/hashicorp/memberlist"

	"github.com/slicerd/slicerd/internal/atomicfile"
)

// KeySizes lists the accepted gossip key lengths in bytes: AES-128, AES-192
// and AES-256, as memberlist accepts them. GenerateKey makes 32-byte keys.
var KeySizes = []int{16, 24, 32}

// maxKeyringFileSize bounds what Start reads from a keyring file: a
// keyring holds a handful of keys of 44 base64 characters each.
const maxKeyringFileSize = 64 << 10

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

// Encrypted reports whether this node encrypts gossip.
func (n *Node) Encrypted() bool { return n.ring != nil }

// KeyID names a gossip key without revealing it: the first 8 bytes of its
// SHA-256, in hex. Tasks report the keys they hold by ID.
func KeyID(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:8])
}

// InstallKey adds key to this node's keyring, for decryption only until
// UseKey makes it the primary key, and rewrites the keyring file.
// Installing a key already held changes nothing.
func (n *Node) InstallKey(key []byte) error {
	return n.changeKeys("install", key, func(r *memberlist.Keyring) error { return r.AddKey(key) })
}

// UseKey makes an installed key this node's primary key, the one it
// encrypts with, and rewrites the keyring file.
func (n *Node) UseKey(key []byte) error {
	return n.changeKeys("use", key, func(r *memberlist.Keyring) error {
		if !slicesContainKey(r.GetKeys(), key) {
			return fmt.Errorf("%w: key %s is not installed on %s; install it first", ErrKeyring, KeyID(key), n.cfg.NodeName)
		}
		return r.UseKey(key)
	})
}

// RemoveKey removes key from this node's keyring and rewrites the keyring
// file. Removing the primary key is refused; removing a key not held
// changes nothing.
func (n *Node) RemoveKey(key []byte) error {
	return n.changeKeys("remove", key, func(r *memberlist.Keyring) error {
		if bytes.Equal(r.GetPrimaryKey(), key) {
			return fmt.Errorf("%w: removing the primary key is not allowed; make another key primary first (use)", ErrKeyring)
		}
		return r.RemoveKey(key)
	})
}

// SetKeys makes this node's keyring hold exactly keys, keys[0] primary,
// and rewrites the keyring file when that changed anything. It reports
// whether it did. A task takes its keyring this way from its Assigner.
func (n *Node) SetKeys(keys [][]byte) (bool, error) {
	if len(keys) == 0 {
		return false, fmt.Errorf("%w: an empty keyring cannot be set", ErrConfig)
	}
	if err := validateKeys(keys); err != nil {
		return false, err
	}
	n.keysMu.Lock()
	defer n.keysMu.Unlock()
	if n.ring == nil {
		return false, fmt.Errorf("%w: gossip encryption is off on %s", ErrNotEncrypted, n.cfg.NodeName)
	}
	have := n.ring.GetKeys()
	if len(have) == len(keys) && bytes.Equal(have[0], keys[0]) && !slices.ContainsFunc(keys, func(k []byte) bool { return !slicesContainKey(have, k) }) {
		return false, nil
	}
	for _, k := range keys {
		if err := n.ring.AddKey(k); err != nil {
			return false, fmt.Errorf("%w: %w", ErrKeyring, err)
		}
	}
	if err := n.ring.UseKey(keys[0]); err != nil {
		return false, fmt.Errorf("%w: %w", ErrKeyring, err)
	}
	for _, k := range n.ring.GetKeys() {
		if !slicesContainKey(keys, k) {
			if err := n.ring.RemoveKey(k); err != nil {
				return false, fmt.Errorf("%w: %w", ErrKeyring, err)
			}
		}
	}
	return true, n.persistKeys("set")
}

// changeKeys validates key, applies change to the keyring and persists it.
func (n *Node) changeKeys(op string, key []byte, change func(*memberlist.Keyring) error) error {
	if err := validateKeys([][]byte{key}); err != nil {
		return fmt.Errorf("%w: %s key: %w", ErrKeyring, op, err)
	}
	if n.isClosed() {
		return fmt.Errorf("gossip: %s key: %w", op, ErrClosed)
	}
	n.keysMu.Lock()
	defer n.keysMu.Unlock()
	if n.ring == nil {
		return fmt.Errorf("%w: gossip encryption is off on %s; start every member with --gossip-key to use a keyring", ErrNotEncrypted, n.cfg.NodeName)
	}
	if err := change(n.ring); err != nil {
		if errors.Is(err, ErrKeyring) {
			return err
		}
		return fmt.Errorf("%w: %s key: %w", ErrKeyring, op, err)
	}
	return n.persistKeys(op)
}

// persistKeys writes the keyring file after a change, with keysMu held.
func (n *Node) persistKeys(op string) error {
	keys := n.ring.GetKeys()
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = KeyID(k)
	}
	n.log.Info("gossip keyring changed", "op", op, "keys", ids, "keyring_file", n.cfg.KeyringFile)
	if n.cfg.KeyringFile == "" {
		return nil
	}
	if err := writeKeyringFile(n.cfg.KeyringFile, keys); err != nil {
		return fmt.Errorf("%w: %s key: the keyring changed but its file %s could not be written: %w; a restart would come back with the old keys", ErrKeyring, op, n.cfg.KeyringFile, err)
	}
	return nil
}
