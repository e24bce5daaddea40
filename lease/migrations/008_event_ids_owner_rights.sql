-- leasework: workers running
-- The triggers that free a deleted row's event id run with their owner's
-- rights, with a fixed search_path.
--
-- Migration 5 creates them so today; tables migrated by an earlier release
-- of migration 5 have them running with the rights of whoever deletes the
-- row, so a worker given only the least-privilege grants (no right on the
-- event id table) failed with insufficient_privilege when it deleted rows
-- (retention, deletion at completion). Idempotent.
--
-- Safe while workers run? Changing a function's attributes takes a moment
-- and no lock on the events table.

ALTER FUNCTION {{schema}}.{{name "forget_event_ids"}}() SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION {{schema}}.{{name "forget_all_event_ids"}}() SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
