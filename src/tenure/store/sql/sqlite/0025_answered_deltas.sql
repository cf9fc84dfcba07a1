-- A run's deltas go in the transaction that records its call's `llm` event (SPEC §18) by the
-- store's own statements (queries any_deltas and delete_answered_deltas, run after the
-- events of a transaction that holds an `llm` event), no longer by a trigger on
-- tenure_events. SQLite writes the rows of a multi-row INSERT into a temporary table before
-- inserting them whenever the table has a row trigger, WHEN false or not: every insert of a
-- transaction's events opened, filled, read back and freed a temporary b-tree for this
-- trigger's sake (about 28,000 instructions for an insert of three events).
DROP TRIGGER tenure_deltas_answered;
