// Package e2e holds end-to-end tests: they build the slicerd and example
// binaries and run them as separate processes talking over loopback, the
// way an operator runs them.
package e2e
