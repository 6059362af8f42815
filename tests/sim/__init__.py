"""Deterministic simulation of Tally's days under faults (docs/proof.md)."""
