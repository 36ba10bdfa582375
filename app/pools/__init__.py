"""Pools: named sets of memories with read and write grants per robot (migration 0020)."""
