-- Placeholder on branch h-runs only: number 008 belongs to the sweep
-- rewrite (another branch), and tern needs consecutive numbers to load
-- 009. The merger drops this file in favour of that branch's 008.
SELECT 1;
