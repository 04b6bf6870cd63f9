"""Reusable widgets of the console (no service access: they render what they are given)."""
