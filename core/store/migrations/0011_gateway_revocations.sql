-- The credential gateway's kill switch (issue 25). A destination named here is refused by
-- every gateway process that reads this store, on any host, within a second of the commit;
-- deleting the row (`wakeful gateway restore <name>`) lets it through again.
CREATE TABLE gateway_revocations (
    destination TEXT PRIMARY KEY,
    revoked_at BIGINT NOT NULL,
    revoked_by TEXT NOT NULL DEFAULT '',
    reason TEXT NOT NULL DEFAULT ''
);
