-- Notification delivery fixes (issue 15 review).
--
-- lease: a token that every claim of a delivery increments. An attempt is
-- recorded only by the claim that still holds it (WHERE lease = $token),
-- so a worker whose lease ran out (and whose delivery another replica
-- claimed since) can change nothing.
-- leased_until: the end of the lease while an attempt is in flight (NULL
-- otherwise). next_attempt_at alone cannot tell a lease from a backoff,
-- and the claim caps what one target and one tenant have in flight.
ALTER TABLE notification_deliveries
    ADD COLUMN lease        bigint NOT NULL DEFAULT 0,
    ADD COLUMN leased_until timestamptz;

-- failures: consecutive failed webhook attempts of the target (0 after a
-- success); the worker's circuit breaker reads it.
ALTER TABLE notification_targets ADD COLUMN failures integer NOT NULL DEFAULT 0;
