//go:build !linux

package netdial

import "syscall"

// setUserTimeout does nothing: TCP_USER_TIMEOUT is Linux's.
func setUserTimeout(string, string, syscall.RawConn) error { return nil }
