"""Contracts, the wire protocol, the hub and its client."""
