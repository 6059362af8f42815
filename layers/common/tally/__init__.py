"""Tally: payment callbacks to a ledger, with nothing lost silently."""
