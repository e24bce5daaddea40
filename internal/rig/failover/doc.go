// Package failover holds the tests that run leasework through a primary
// database failing over to its standby: a streaming-replication pair of
// throwaway clusters (internal/rig/pgserver) in every run, and a
// pg_auto_failover cluster in a test built only with the autofailover tag
// (go test -tags autofailover -run AutoFailover ./internal/rig/failover/; it
// needs pg_autoctl: Debian's postgresql-15-auto-failover and
// pg-auto-failover-cli packages, which .ci/run installs and runs it with
// when $LEASEWORK_PG_AUTO_FAILOVER is set).
//
// The tests need the PostgreSQL server binaries, pg_basebackup included;
// they start their own servers, whatever $LEASEWORK_DSN names, because
// they stop, kill and promote them.
package failover
