package assign

import (
	"errors"
	"strings"
	"testing"
)

// A name's error shows the character that is not allowed, whole: a
// multi-byte character is quoted as itself, not as its first byte.
func TestNameErrorsQuoteTheCharacter(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{ValidateJobName("kü"), `job name "kü" has 'ü' at byte 1;`},
		{ValidateJobName("k v"), `job name "k v" has ' ' at byte 1;`},
		{ValidateJobName("Kv"), `job name "Kv" has 'K' at byte 0;`},
		{ValidateJobName("kv\xc3"), `job name "kv\xc3" has the invalid UTF-8 byte 0xc3 at byte 2;`},
		{ValidateTaskName("kv-€"), `task name "kv-€" has '€' at byte 3;`},
		{ValidateIncarnation("ab✓"), `incarnation "ab✓" has '✓' at byte 2;`},
	} {
		if !errors.Is(tc.err, ErrInvalidName) || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("got %v; want ErrInvalidName with %q", tc.err, tc.want)
		}
	}
	for _, ok := range []string{"kv", "kv-0.a_b"} {
		if err := ValidateJobName(ok); err != nil {
			t.Errorf("ValidateJobName(%q): %v", ok, err)
		}
	}
}
