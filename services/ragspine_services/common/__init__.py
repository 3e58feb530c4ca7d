"""Plumbing both services share: error mapping, auth, health, metrics, JSON logs, server options."""
