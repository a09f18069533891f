-- Database-side fault points on the ledger of one schema.
-- {{schema}} is the quoted schema, {{ledger}} the quoted ledger table.

-- One row per armed fault.
CREATE TABLE {{schema}}.harmless_fault_plans (
    id          bigint   PRIMARY KEY,
    namespace   bytea    NOT NULL,
    event_id    bytea    NOT NULL,
    attempt     integer  NOT NULL CHECK (attempt >= 0),   -- 0 matches every attempt
    times       integer  NOT NULL CHECK (times >= 0),     -- 0 fires every time
    point       text     NOT NULL CHECK (point IN ('effect', 'commit')),
    action      text     NOT NULL CHECK (action IN ('raise', 'sleep', 'terminate', 'sleep-then-raise', 'gate')),
    sleep       interval NOT NULL,
    evidence    regclass NOT NULL,                          -- the fault's own sequence
    opened      regclass,                                   -- a gate's: called once it opens
    passed      regclass,                                   -- a gate's: counts the rows that went through
    description text     NOT NULL
);

CREATE SEQUENCE {{schema}}.harmless_fault_ids;

-- Fires every plan for this point and this ledger row, in plan order. The
-- point is the trigger's argument. A plan with times > 0 counts every
-- matching row in its evidence and acts on the first `times` of them only:
-- nextval is atomic, so concurrent deliveries cannot both be the first.
CREATE FUNCTION {{schema}}.harmless_fault_fire() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, {{schema}}, pg_temp
AS $fire$
DECLARE
    p        record;
    n        bigint;
    deadline timestamptz;
BEGIN
    FOR p IN
        SELECT * FROM harmless_fault_plans
        WHERE point = TG_ARGV[0]
          AND namespace = NEW.namespace
          AND event_id = NEW.event_id
          AND attempt IN (0, NEW.attempt)
        ORDER BY id
    LOOP
        -- Evidence first: a sequence keeps its value through the rollback
        -- (or the termination) the action is about to cause.
        n := nextval(p.evidence);
        IF p.times > 0 AND n > p.times THEN
            CONTINUE;
        END IF;
        CASE p.action
        WHEN 'raise' THEN
            RAISE EXCEPTION USING
                ERRCODE = 'HF001',
                MESSAGE = 'harmless injected fault: ' || p.description,
                DETAIL  = format('fault %s fired on attempt %s', p.id, NEW.attempt);
        WHEN 'sleep' THEN
            PERFORM pg_sleep_for(p.sleep);
        WHEN 'gate' THEN
            -- Sequences are read outside any snapshot, so a transaction at
            -- REPEATABLE READ or SERIALIZABLE sees the gate open too.
            deadline := clock_timestamp() + p.sleep;
            WHILE pg_sequence_last_value(p.opened) IS NULL AND clock_timestamp() < deadline LOOP
                PERFORM pg_sleep(0.005);
            END LOOP;
            PERFORM nextval(p.passed);
        WHEN 'sleep-then-raise' THEN
            PERFORM pg_sleep_for(p.sleep);
            RAISE EXCEPTION USING
                ERRCODE = 'HF001',
                MESSAGE = 'harmless injected fault: ' || p.description,
                DETAIL  = format('fault %s fired on attempt %s, after its sleep', p.id, NEW.attempt);
        WHEN 'terminate' THEN
            PERFORM pg_terminate_backend(pg_backend_pid());
            -- The pending interrupt ends the backend inside this sleep.
            PERFORM pg_sleep(60);
            RAISE EXCEPTION USING
                ERRCODE = 'HF002',
                MESSAGE = 'harmless fault did not terminate its backend: ' || p.description;
        END CASE;
    END LOOP;
    RETURN NULL;
END
$fire$;

CREATE TRIGGER harmless_fault_at_effect
    AFTER INSERT ON {{ledger}}
    FOR EACH ROW EXECUTE FUNCTION {{schema}}.harmless_fault_fire('effect');

CREATE CONSTRAINT TRIGGER harmless_fault_at_commit
    AFTER INSERT ON {{ledger}}
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION {{schema}}.harmless_fault_fire('commit');
