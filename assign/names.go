package assign

import (
	"fmt"
	"unicode/utf8"
)

// Limits on names. They keep names safe in serf tags (512 bytes in all),
// file paths, logs and URLs.
const (
	MaxJobNameLen     = 63
	MaxTaskNameLen    = 128
	MaxIncarnationLen = 64
)

// ValidateJobName accepts 1–63 characters of lower-case letters, digits,
// '-', '_' and '.', starting with a letter or digit.
func ValidateJobName(name string) error {
	if err := validateName("job", name, MaxJobNameLen, false); err != nil {
		return err
	}
	return nil
}

// ValidateTaskName accepts 1–128 characters of letters, digits, '-', '_',
// '.' and ':', starting with a letter or digit.
func ValidateTaskName(name string) error {
	return validateName("task", name, MaxTaskNameLen, true)
}

func validateName(kind, name string, max int, upperAndColon bool) error {
	if name == "" {
		return fmt.Errorf("%w: %s name is empty", ErrInvalidName, kind)
	}
	if len(name) > max {
		return fmt.Errorf("%w: %s name %.20q… is %d bytes long; the limit is %d", ErrInvalidName, kind, name, len(name), max)
	}
	for i, c := range name {
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' ||
			i > 0 && (c == '-' || c == '_' || c == '.') ||
			upperAndColon && (c >= 'A' && c <= 'Z' || i > 0 && c == ':')
		if !ok {
			allowed := "lower-case letters, digits, '-', '_' and '.'"
			if upperAndColon {
				allowed = "letters, digits, '-', '_', '.' and ':'"
			}
			return fmt.Errorf("%w: %s name %q has %s at byte %d; use %s, starting with a letter or digit", ErrInvalidName, kind, name, quoteChar(name[i:]), i, allowed)
		}
	}
	return nil
}

// ValidateIncarnation accepts a store incarnation ID: 1–64 characters of
// letters, digits, '-' and '_'. slicerd's stores use 32 lower-case hex
// digits.
func ValidateIncarnation(id string) error {
	if id == "" {
		return fmt.Errorf("%w: incarnation is empty", ErrInvalidName)
	}
	if len(id) > MaxIncarnationLen {
		return fmt.Errorf("%w: incarnation %.20q… is %d bytes long; the limit is %d", ErrInvalidName, id, len(id), MaxIncarnationLen)
	}
	for i, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("%w: incarnation %q has %s at byte %d; use letters, digits, '-' and '_'", ErrInvalidName, id, quoteChar(id[i:]), i)
		}
	}
	return nil
}

// quoteChar quotes the character s starts with, as a name's error shows it:
// the whole character ('ü'), or the byte (0xc3) where s is not UTF-8.
func quoteChar(s string) string {
	r, size := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError && size <= 1 {
		return fmt.Sprintf("the invalid UTF-8 byte %#x", s[0])
	}
	return fmt.Sprintf("%q", r)
}
