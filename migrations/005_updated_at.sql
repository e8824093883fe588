-- inorder 005: the updated_at trigger fires only for updates that do not set updated_at themselves.
-- A processor advancing per record sets it in its own UPDATE, which spares a plpgsql call per record;
-- every other update (operators, hand-written SQL) still gets it from the trigger.
DROP TRIGGER cursor_set_updated_at ON inorder.cursor;
CREATE TRIGGER cursor_set_updated_at
    BEFORE UPDATE ON inorder.cursor
    FOR EACH ROW WHEN (NEW.updated_at IS NOT DISTINCT FROM OLD.updated_at)
    EXECUTE FUNCTION inorder.set_updated_at();
