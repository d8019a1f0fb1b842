"""Verification: test vectors and bit-exact comparison of executors against the golden model."""
