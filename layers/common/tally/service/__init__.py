"""Use cases: orchestration only (domain decides, store persists, channels talk to the outside)."""
