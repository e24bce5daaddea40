package pq

import "net"

// Inner returns the lib/pq value inside a connection, statement or rows of
// this package, or nil.
func Inner(v any) any {
	switch v := v.(type) {
	case *conn:
		return v.pqConn
	case *stmt:
		return v.pqStmt
	case *rows:
		return v.pqRows
	}
	return nil
}

// Socket returns the socket of a connection of this package.
func Socket(dc any) net.Conn { return dc.(*conn).socket }
