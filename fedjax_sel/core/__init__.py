"""Core types, the cohort engine, the round loop and the server optimizer."""
