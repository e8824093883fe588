-- inorder 015: a process's filter.
--
-- A process may read only the rows a filter keeps (Source.Where, --where): a boolean expression over the
-- source's columns. Its position then means "every row up to here that the filter keeps has been
-- handled", so the filter is part of the process's identity, recorded with its source: a processor
-- refuses to start with another one. NULL (or an empty string) is no filter.
ALTER TABLE inorder.cursor ADD COLUMN source_filter text;
