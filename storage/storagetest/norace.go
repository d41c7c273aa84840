//go:build !race

package storagetest

const raceEnabled = false
