"""Pure domain logic: standard library only, no I/O (a test enforces the dependency rule)."""
