//go:build !linux

package memtrim

// Trim does nothing outside Linux.
func Trim() (Result, error) { return Result{}, ErrUnsupported }
