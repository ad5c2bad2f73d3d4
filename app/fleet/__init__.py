"""Several replicas on one database: two-phase promotion, one trainer at a time, the object store."""
