"""The sweep's tests (a package: tests/compress also has a test_driver.py, and pytest's default import mode needs
distinct module names for files that share a base name)."""
