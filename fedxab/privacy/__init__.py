"""Differential privacy: mechanisms, accountants and the per-client ledger (privacy issue)."""
