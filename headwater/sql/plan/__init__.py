"""Stage 2, plan: a parsed query and its tables' definitions to what runs: the
maintenance key, the EMIT triggers, the path (fast or general) and every refusal,
with its position."""
