package storage

import "go.etcd.io/bbolt"

// Internals the external tests (package storage_test) reach: the bbolt
// schema's names, to damage a closed data file on purpose, and the config
// decoder, to fuzz it.
var (
	BucketMeta       = bucketMeta
	KeyFormatVersion = keyFormatVersion
	KeyIncarnation   = keyIncarnation
	BucketJobs       = bucketJobs
	KeyCurrent       = keyCurrent
	KeyPrevious      = keyPrevious
	KeyConfig        = keyConfig
	BucketDeleted    = bucketDeleted

	DecodeConfig = decodeConfig
)

// DB is b's bbolt handle.
func (b *Bolt) DB() *bbolt.DB { return b.db }
