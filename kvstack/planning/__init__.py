"""Pure planning: hardware snapshot + KV geometry + workload -> Plan. No I/O here."""
