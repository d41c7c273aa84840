package assign

import "fmt"

// MaxRedundancyLimit bounds how many tasks may serve one slice.
const MaxRedundancyLimit = 64

// Config is a job's sharding configuration.
type Config struct {
	// MinRedundancy is the number of tasks every slice is assigned to, when
	// that many tasks are live.
	MinRedundancy int `json:"min_redundancy"`
	// MaxRedundancy caps the tasks a hot slice may be replicated to.
	MaxRedundancy int `json:"max_redundancy"`
}

// DefaultConfig returns the configuration a job gets when nobody set one:
// every key on exactly one task.
func DefaultConfig() Config {
	return Config{MinRedundancy: 1, MaxRedundancy: 1}
}

// Validate checks 1 <= MinRedundancy <= MaxRedundancy <= MaxRedundancyLimit.
func (c Config) Validate() error {
	switch {
	case c.MinRedundancy < 1:
		return fmt.Errorf("%w: min redundancy is %d; it must be at least 1", ErrInvalidConfig, c.MinRedundancy)
	case c.MaxRedundancy < c.MinRedundancy:
		return fmt.Errorf("%w: max redundancy %d is below min redundancy %d", ErrInvalidConfig, c.MaxRedundancy, c.MinRedundancy)
	case c.MaxRedundancy > MaxRedundancyLimit:
		return fmt.Errorf("%w: max redundancy %d is above the limit of %d", ErrInvalidConfig, c.MaxRedundancy, MaxRedundancyLimit)
	}
	return nil
}
